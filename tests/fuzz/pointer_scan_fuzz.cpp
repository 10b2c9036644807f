// What tierrt reads to find the memory a copy touches and the pointers it
// leaves behind: the pointer tables that copies fill (driven by a random
// program of writes, copies and frees, checked against the least each table
// must still hold) and the shapes read from copy, memset and stream memory
// operation descriptors.
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "fuzz_input.h"
#include "fuzz_target.h"
#include "runtime/copy_shapes.h"
#include "runtime/pointer_tables.h"

namespace {

using tierrt::PointerTables;
using Unit = PointerTables::Unit;

// Mostly a small set of units, so that programs revisit them; sometimes any.
Unit take_unit(FuzzInput& in) {
  const auto b = in.take<std::uint8_t>();
  if (b < 224) return (Unit{b} + 1) * 0x40;
  return in.take<Unit>() | 1;
}

class TablesProgram {
 public:
  // The tables are large (one static array): built anew in place for each
  // input rather than mapped and unmapped.
  explicit TablesProgram(FuzzInput& in) : in_(in) {
    static std::optional<PointerTables> tables;
    tables.emplace();
    tables_ = &*tables;
  }

  void run_step() {
    ++step_;
    switch (in_.take<std::uint8_t>() % 5) {
      case 0: return write();
      case 1: return copy();
      case 2: return forget(take_unit(in_));
      case 3: return filled_ ? check(take_unit(in_)) : fill();
      default: return check(take_unit(in_));
    }
  }

  // Every table while there are few; else a sample, so that a step costs
  // the same however many tables a fill made.
  void check_some() {
    if (least_.size() <= 32) {
      for (const auto& entry : least_) check(entry.first);
      return;
    }
    for (std::uint64_t i = 0; i < 16; ++i) {
      const auto it = least_.lower_bound((step_ * 16 + i) * 0x9E3779B97F4A7C15ull);
      check(it == least_.end() ? least_.begin()->first : it->first);
    }
  }

 private:
  // A copy from host memory wrote [begin, end) of `unit`; the scan found `targets`.
  void write() {
    const Unit unit = take_unit(in_);
    const auto begin = in_.take<std::uint16_t>();
    const auto end = begin + in_.take<std::uint16_t>();
    const int n = in_.take<std::uint8_t>() % 40;
    std::vector<Unit> targets;
    for (int i = 0; i < n; ++i) targets.push_back(take_unit(in_));
    const bool every = in_.take<std::uint8_t>() % 16 == 0;
    const CUdeviceptr found_begin = begin + 8, found_end = found_begin + 8 * targets.size();
    tables_->wrote(unit, begin, end, targets, found_begin, found_end, every);
    least_.erase(unit);  // overwritten whole, perhaps
    if (targets.empty() || every) return;
    auto& least = least_[unit];
    for (Unit t : targets) least[t] = step_;
    if (least.size() > PointerTables::kTargets) least_.erase(unit);
  }

  void copy() {
    const Unit src = take_unit(in_), dst = take_unit(in_);
    const auto begin = in_.take<std::uint16_t>();
    const auto end = begin + in_.take<std::uint16_t>();
    tables_->copied(src, begin, end, dst, in_.take<std::uint16_t>());
    least_.erase(dst);  // replaced, or added to
  }

  void forget(Unit unit) {
    tables_->forget(unit);
    least_.erase(unit);
    freed_at_[unit] = step_;
    // It has no table, and no table points to it.
    auto lock = tables_->lock();
    tables_->targets_of(unit, [](Unit) { FUZZ_CHECK(!"a freed unit kept its table"); }, lock);
    for (auto it = least_.lower_bound(take_unit(in_)); it != least_.end() && it->first % 16 != 0; ++it)
      tables_->targets_of(it->first, [&](Unit t) { FUZZ_CHECK(t != unit); }, lock);
  }

  // Many tables at once: enough to fill the table and lose one. Checked
  // here, on a sample: the model of every table would cost more than them.
  void fill() {
    filled_ = true;  // once per input: a fill costs a thousand writes
    const Unit base = take_unit(in_);
    const unsigned n = in_.take<std::uint16_t>() % (PointerTables::kMaxTables + 64);
    const Unit target = take_unit(in_);
    auto unit_at = [&](unsigned i) { return base + 0x1000 * (Unit{i} + 1); };
    for (unsigned i = 0; i < n; ++i) tables_->wrote(unit_at(i), 0, 64, {&target, 1}, 8, 16, false);
    // The units written wrap past 2^64 as unit_at does (the distance is
    // taken modulo 2^64 too): a base near the top writes small units.
    std::erase_if(least_, [&](const auto& entry) {
      const Unit d = entry.first - base;
      return d != 0 && d % 0x1000 == 0 && d / 0x1000 <= n;
    });
    auto lock = tables_->lock();
    for (unsigned i = 0; i < n; i += 1 + n / 16) {
      bool found = false;
      if (tables_->targets_of(unit_at(i), [&](Unit t) { found |= t == target; }, lock)) FUZZ_CHECK(found);
    }
  }

  // A table holds at least each target written to it since that target was
  // last freed (unless it now points to every block, or a table was lost).
  void check(Unit unit) {
    std::set<Unit> seen;
    auto lock = tables_->lock();
    const bool known = tables_->targets_of(unit, [&](Unit t) { seen.insert(t); }, lock);
    FUZZ_CHECK(seen.size() <= PointerTables::kTargets);
    const auto it = least_.find(unit);
    if (!known || it == least_.end()) return;
    for (const auto& [target, written] : it->second) {
      const auto freed = freed_at_.find(target);
      if (freed == freed_at_.end() || freed->second < written) FUZZ_CHECK(seen.count(target) == 1);
    }
  }

  FuzzInput& in_;
  PointerTables* tables_ = nullptr;
  std::uint64_t step_ = 0;
  bool filled_ = false;
  std::map<Unit, std::map<Unit, std::uint64_t>> least_;  // unit -> target -> step it was written
  std::unordered_map<Unit, std::uint64_t> freed_at_;     // unit -> step it was last freed
};

CUmemorytype take_memory_type(FuzzInput& in) { return static_cast<CUmemorytype>(in.take<std::uint8_t>() % 6); }

bool on_device(CUmemorytype t) { return t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED; }

template <class Copy>
void check_copy(FuzzInput& in) {
  Copy c;
  for (std::size_t i = 0; i < sizeof c; ++i) reinterpret_cast<unsigned char*>(&c)[i] = in.take<unsigned char>();
  c.srcMemoryType = take_memory_type(in);
  c.dstMemoryType = take_memory_type(in);
  const tierrt::StridedRange s = tierrt::copy_source(c), d = tierrt::copy_destination(c);
  if (!on_device(c.srcMemoryType) || c.srcDevice == 0) FUZZ_CHECK(s.ptr == 0);
  else FUZZ_CHECK(s.width == c.WidthInBytes && s.rows == c.Height);
  if (!on_device(c.dstMemoryType) || c.dstDevice == 0) FUZZ_CHECK(d.ptr == 0);
  else FUZZ_CHECK(d.width == c.WidthInBytes && d.rows == c.Height);
}

void check_shapes(FuzzInput& in) {
  switch (in.take<std::uint8_t>() % 5) {
    case 0: return check_copy<CUDA_MEMCPY2D>(in);
    case 1: return check_copy<CUDA_MEMCPY3D>(in);
    case 2: return check_copy<CUDA_MEMCPY3D_PEER>(in);
    case 3: {
      CUDA_MEMCPY3D_BATCH_OP op;
      for (std::size_t i = 0; i < sizeof op; ++i) reinterpret_cast<unsigned char*>(&op)[i] = in.take<unsigned char>();
      op.src.type = static_cast<CUmemcpy3DOperandType>(in.take<std::uint8_t>() % 4);
      op.dst.type = static_cast<CUmemcpy3DOperandType>(in.take<std::uint8_t>() % 4);
      const tierrt::StridedRange s = tierrt::copy_source(op), d = tierrt::copy_destination(op);
      if (op.src.type != CU_MEMCPY_OPERAND_TYPE_POINTER) FUZZ_CHECK(s.ptr == 0);
      if (op.dst.type != CU_MEMCPY_OPERAND_TYPE_POINTER) FUZZ_CHECK(d.ptr == 0);
      return;
    }
    default: {
      CUstreamBatchMemOpParams op;
      for (std::size_t i = 0; i < sizeof op; ++i) reinterpret_cast<unsigned char*>(&op)[i] = in.take<unsigned char>();
      op.operation = static_cast<CUstreamBatchMemOpType>(in.take<std::uint8_t>() % 8);
      const tierrt::StridedRange r = tierrt::memory_operation_target(op);
      FUZZ_CHECK(r.empty() || r.width == 4 || r.width == 8);
      const auto m = tierrt::memset_2d(in.take<CUdeviceptr>(), in.take<std::uint32_t>(), in.take<std::uint32_t>(),
                                       in.take<std::uint32_t>(), 1u << (in.take<std::uint8_t>() % 3));
      FUZZ_CHECK(m.slices == 1);
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  if (in.take<std::uint8_t>() % 4 == 0) {
    while (!in.empty()) check_shapes(in);
    return 0;
  }
  TablesProgram program(in);
  // Bounded: a free scans every table, and a fill makes a thousand.
  for (int step = 0; step < 64 && !in.empty(); ++step) {
    program.run_step();
    program.check_some();
  }
  return 0;
}
