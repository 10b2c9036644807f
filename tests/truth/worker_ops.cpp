// The operations a worker draws, each written as a correct CUDA program
// would write it: order every cross-stream use with events, keep the
// sources of asynchronous copies alive until their stream is synchronized,
// and predict every byte in the host mirror.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "worker.h"

namespace truth {

namespace {

constexpr size_t kMaxBlocksPerThread = 40;
constexpr size_t kMaxTablesPerThread = 3;
constexpr size_t kTableBytes = sizeof(TableEntry) * kTableSlots;

std::string range_text(size_t off, size_t n) {
  char text[48];
  std::snprintf(text, sizeof text, "[%zu+%zu)", off, n);
  return text;
}

}  // namespace

void Worker::step(uint64_t index) {
  if (o_.faults && index % o_.fault_every == o_.fault_every - 1) arm_fault();
  struct Weighted {
    unsigned weight;
    void (Worker::*op)();
  };
  static const Weighted kOps[] = {
      {7, &Worker::op_free},        {9, &Worker::op_htod},          {6, &Worker::op_memset},
      {8, &Worker::op_dtod},        {18, &Worker::op_kernel},       {4, &Worker::op_table_write},
      {8, &Worker::op_table_kernel}, {3, &Worker::op_capture},      {6, &Worker::op_graph_launch},
      {10, &Worker::op_verify},     {4, &Worker::op_stream_sync},   {2, &Worker::op_event_sync},
  };
  constexpr unsigned kAllocWeight = 9;
  unsigned total = kAllocWeight;
  for (const auto& w : kOps) total += w.weight;
  unsigned r = static_cast<unsigned>(rand(total));
  if (r < kAllocWeight || pick_block(false) < 0) {
    op_alloc(o_.tables && coin(8));
    return;
  }
  r -= kAllocWeight;
  for (const auto& w : kOps) {
    if (r < w.weight) {
      (this->*w.op)();
      return;
    }
    r -= w.weight;
  }
}

// Allocation: cuMemAlloc or stream-ordered cuMemAllocAsync, 64 KiB to 8 MiB
// (a pointer table: 128 bytes), then written whole.
void Worker::op_alloc(bool table) {
  size_t tables = 0;
  for (const auto& [id, b] : blocks_) tables += b.is_table;
  if (table && tables >= kMaxTablesPerThread) table = false;
  size_t bytes = kTableBytes;
  if (!table) {
    const size_t base = size_t{64} << 10 << rand(7);
    bytes = base + rand(base) / 4096 * 4096;
  }
  if (blocks_.size() >= kMaxBlocksPerThread || live_bytes_ + bytes > cap_bytes_) {
    op_free();
    return;
  }
  const bool async = coin();
  const int s = pick_stream();
  CUdeviceptr p = 0;
  if (async) {
    ++tally_.ops["alloc-async"];
    if (!check(d_.mem_alloc_async(&p, bytes, handle(s)), Call::kMemAllocAsync)) return;
  } else {
    ++tally_.ops["alloc"];
    if (!check(d_.mem_alloc(&p, bytes), Call::kMemAlloc)) return;
  }
  const int id = next_id_++;
  Block& b = blocks_[id];
  b.ptr = p;
  b.bytes = bytes;
  b.from_async = async;
  b.last_stream = async ? s : -1;
  b.is_table = table;
  b.mirror.assign(bytes / 4, 0);
  live_bytes_ += bytes;
  note(id, std::string(async ? "cuMemAllocAsync on stream " + std::to_string(s) : "cuMemAlloc") + " of " +
               std::to_string(bytes) + " bytes at 0x" + std::to_string(p));
  if (table)
    write_table(id);
  else
    write_whole(id);
}

// A new block gets its first bytes from a copy, a memset or a fill kernel.
void Worker::write_whole(int id) {
  Block& b = blocks_.at(id);
  const int s = pick_stream();
  order_after(s, b.last_stream);
  b.last_stream = s;
  switch (rand(3)) {
    case 0: {
      std::vector<uint32_t> src(b.words());
      apply_fill(src.data(), src.size(), static_cast<uint32_t>(rng_()));
      if (!check(d_.htod_async(b.ptr, src.data(), b.bytes, handle(s)), Call::kCopyAsync)) return;
      b.mirror = src;
      pending_host_[s].push_back(std::move(src));
      note(id, "whole cuMemcpyHtoDAsync on stream " + std::to_string(s));
      break;
    }
    case 1: {
      const auto v = static_cast<uint32_t>(rng_());
      if (!check(d_.memset_d32_async(b.ptr, v, b.words(), handle(s)), Call::kMemsetAsync)) return;
      std::fill(b.mirror.begin(), b.mirror.end(), v);
      note(id, "whole cuMemsetD32Async on stream " + std::to_string(s));
      break;
    }
    default: {
      KernelOp op{KernelKind::kFill, id, -1, {0, b.words()}, {}, static_cast<uint32_t>(rng_())};
      if (!check(launch(op, s), Call::kLaunchKernel)) return;
      apply(op);
      note(id, "whole fill kernel on stream " + std::to_string(s));
      break;
    }
  }
  b.unknown = false;
}

// The blocks and pointer tables that will never be used again leave the
// program's books; tables naming a freed block turn stale (never used
// until rewritten), and graphs naming it are destroyed first.
void Worker::forget(int id) {
  destroy_graphs_naming(id);
  for (auto& [tid, t] : blocks_)
    for (const TableSlot& slot : t.slots)
      if (slot.block == id) t.table_valid = false;
}

// cuMemFree (which may synchronize, as the driver documents, for memory
// not allocated stream-ordered; a stream-ordered block is synchronized
// first, since cuMemFree does not wait for it), or cuMemFreeAsync on any
// stream after an event from the block's last stream.
void Worker::op_free() {
  const int id = pick_block(coin(6));
  if (id < 0) return;
  forget(id);
  Block& b = blocks_.at(id);
  if (b.from_async && coin()) {
    const int s = pick_stream();
    order_after(s, b.last_stream);
    ++tally_.ops["free-async"];
    if (!check(d_.mem_free_async(b.ptr, handle(s)), Call::kMemFreeAsync)) return;
  } else {
    if (b.from_async && b.last_stream >= 0) synchronize(b.last_stream);
    ++tally_.ops["free"];
    if (!check(d_.mem_free(b.ptr), Call::kMemFree)) return;
  }
  live_bytes_ -= b.bytes;
  blocks_.erase(id);
}

void Worker::op_htod() {
  const int id = pick_block(false);
  Block& b = blocks_.at(id);
  const bool full = coin(4), async = coin();
  const Range r = pick_range(b, full);
  std::vector<uint32_t> src(r.n);
  apply_fill(src.data(), r.n, static_cast<uint32_t>(rng_()));
  const int s = async ? pick_stream() : 0;
  order_after(s, b.last_stream);
  b.last_stream = s;
  ++tally_.ops[async ? "htod-async" : "htod"];
  note(id, std::string(async ? "cuMemcpyHtoDAsync" : "cuMemcpyHtoD") + " " + range_text(r.off, r.n) + " on stream " +
               std::to_string(s));
  const CUresult res = async ? d_.htod_async(b.ptr + r.off * 4, src.data(), r.n * 4, handle(s))
                             : d_.htod(b.ptr + r.off * 4, src.data(), r.n * 4);
  if (!check(res, async ? Call::kCopyAsync : Call::kCopy)) {
    b.unknown = true;
    return;
  }
  std::copy(src.begin(), src.end(), b.mirror.begin() + static_cast<std::ptrdiff_t>(r.off));
  if (full) b.unknown = false;
  if (async) pending_host_[s].push_back(std::move(src));
}

void Worker::op_memset() {
  const int id = pick_block(false);
  Block& b = blocks_.at(id);
  const bool full = coin(4), async = coin(), bytewise = coin();
  const Range r = pick_range(b, full);
  const int s = async ? pick_stream() : 0;
  const auto v = static_cast<uint32_t>(rng_());
  order_after(s, b.last_stream);
  b.last_stream = s;
  const CUdeviceptr p = b.ptr + r.off * 4;
  CUresult res;
  if (bytewise)
    res = async ? d_.memset_d8_async(p, static_cast<unsigned char>(v), r.n * 4, handle(s))
                : d_.memset_d8(p, static_cast<unsigned char>(v), r.n * 4);
  else
    res = async ? d_.memset_d32_async(p, v, r.n, handle(s)) : d_.memset_d32(p, v, r.n);
  ++tally_.ops[std::string(bytewise ? "memset-d8" : "memset-d32") + (async ? "-async" : "")];
  note(id, std::string(bytewise ? "cuMemsetD8" : "cuMemsetD32") + (async ? "Async " : " ") + range_text(r.off, r.n) +
               " on stream " + std::to_string(s));
  if (!check(res, async ? Call::kMemsetAsync : Call::kMemset)) {
    b.unknown = true;
    return;
  }
  if (bytewise)
    std::memset(b.mirror.data() + r.off, static_cast<unsigned char>(v), r.n * 4);
  else
    std::fill_n(b.mirror.begin() + static_cast<std::ptrdiff_t>(r.off), r.n, v);
  if (full) b.unknown = false;
}

void Worker::op_dtod() {
  const int src_id = pick_block(false), dst_id = pick_block(false);
  if (src_id == dst_id) return;
  Block &src = blocks_.at(src_id), &dst = blocks_.at(dst_id);
  const Range dr = pick_range(dst, false);
  const size_t n = std::min(dr.n, src.words());
  const size_t src_off = rand(src.words() - n + 1);
  const bool async = coin();
  const int s = async ? pick_stream() : 0;
  order_for(s, {src_id, dst_id});
  used_on(s, {src_id, dst_id});
  ++tally_.ops[async ? "dtod-async" : "dtod"];
  note(dst_id, std::string(async ? "cuMemcpyDtoDAsync" : "cuMemcpyDtoD") + " from block " + std::to_string(src_id) +
                   " " + range_text(src_off, n) + " to " + range_text(dr.off, n) + " on stream " + std::to_string(s));
  const CUdeviceptr to = dst.ptr + dr.off * 4, from = src.ptr + src_off * 4;
  const CUresult res = async ? d_.dtod_async(to, from, n * 4, handle(s)) : d_.dtod(to, from, n * 4);
  if (!check(res, async ? Call::kCopyAsync : Call::kCopy) || src.unknown) {
    dst.unknown = true;
    return;
  }
  std::copy_n(src.mirror.begin() + static_cast<std::ptrdiff_t>(src_off), n,
              dst.mirror.begin() + static_cast<std::ptrdiff_t>(dr.off));
}

// A fill, add or mix on ranges of data blocks, or an add through a valid
// pointer table. False when there is nothing to launch on.
bool Worker::random_kernel(KernelOp* op) {
  const auto kind = static_cast<KernelKind>(rand(o_.tables ? 4 : 3));
  if (kind == KernelKind::kTable) {
    const int t = pick_block(true);
    if (t < 0 || !blocks_.at(t).table_valid) return false;
    *op = KernelOp{kind, t, -1, {}, {}, static_cast<uint32_t>(rng_())};
    return true;
  }
  const int dst = pick_block(false);
  const Range dr = pick_range(blocks_.at(dst), coin(8));
  *op = KernelOp{kind, dst, -1, dr, {}, static_cast<uint32_t>(rng_())};
  if (kind != KernelKind::kMix) return true;
  const int src = pick_block(false);
  if (src == dst) return false;
  const size_t n = std::min(dr.n, blocks_.at(src).words());
  op->dst_range.n = n;
  op->src = src;
  op->src_range = {rand(blocks_.at(src).words() - n + 1), n};
  return true;
}

CUresult Worker::launch(const KernelOp& op, int stream) {
  const Block& dst = blocks_.at(op.dst);
  uint32_t arg = op.arg;
  if (op.kind == KernelKind::kTable) {
    CUdeviceptr table = dst.ptr;
    uint32_t slots = kTableSlots;
    void* params[] = {&table, &slots, &arg};
    return d_.launch_kernel(k_.table, 1, 1, 1, 32, 1, 1, 0, handle(stream), params, nullptr);
  }
  CUdeviceptr p = dst.ptr + op.dst_range.off * 4;
  uint64_t n = op.dst_range.n;
  if (op.kind == KernelKind::kMix) {
    CUdeviceptr q = blocks_.at(op.src).ptr + op.src_range.off * 4;
    void* params[] = {&p, &q, &n, &arg};
    return d_.launch_kernel(k_.mix, 1, 1, 1, 32, 1, 1, 0, handle(stream), params, nullptr);
  }
  void* params[] = {&p, &n, &arg};
  return d_.launch_kernel(op.kind == KernelKind::kFill ? k_.fill : k_.add, 1, 1, 1, 32, 1, 1, 0, handle(stream),
                          params, nullptr);
}

// Every block the kernel reaches: through its parameters, or through the
// pointer table it reads.
std::vector<int> Worker::named(const KernelOp& op) const {
  std::vector<int> ids{op.dst};
  if (op.kind == KernelKind::kMix) ids.push_back(op.src);
  if (op.kind == KernelKind::kTable)
    for (const TableSlot& slot : blocks_.at(op.dst).slots) ids.push_back(slot.block);
  return ids;
}

void Worker::apply(const KernelOp& op) {
  Block& dst = blocks_.at(op.dst);
  switch (op.kind) {
    case KernelKind::kFill:
      apply_fill(dst.mirror.data() + op.dst_range.off, op.dst_range.n, op.arg);
      if (op.dst_range.n == dst.words()) dst.unknown = false;
      break;
    case KernelKind::kAdd:
      apply_add(dst.mirror.data() + op.dst_range.off, op.dst_range.n, op.arg);
      break;
    case KernelKind::kMix: {
      const Block& src = blocks_.at(op.src);
      apply_mix(dst.mirror.data() + op.dst_range.off, src.mirror.data() + op.src_range.off, op.dst_range.n, op.arg);
      if (src.unknown) dst.unknown = true;
      break;
    }
    case KernelKind::kTable:
      for (uint32_t j = 0; j < dst.slots.size(); ++j) {
        const TableSlot& slot = dst.slots[j];
        apply_add(blocks_.at(slot.block).mirror.data() + slot.range.off, slot.range.n, table_delta(op.arg, j));
      }
      break;
  }
}

void Worker::mark_unknown(const KernelOp& op) {
  if (op.kind != KernelKind::kTable) {
    blocks_.at(op.dst).unknown = true;
    return;
  }
  for (const TableSlot& slot : blocks_.at(op.dst).slots) blocks_.at(slot.block).unknown = true;
}

void Worker::op_kernel() {
  KernelOp op;
  if (!random_kernel(&op) || op.kind == KernelKind::kTable) return;
  const int s = pick_stream();
  const auto ids = named(op);
  order_for(s, ids);
  used_on(s, ids);
  static const char* const kNames[] = {"kernel-fill", "kernel-add", "kernel-mix", "kernel-table"};
  ++tally_.ops[kNames[static_cast<int>(op.kind)]];
  note(op.dst, std::string(kNames[static_cast<int>(op.kind)]) + " " + range_text(op.dst_range.off, op.dst_range.n) +
                   (op.kind == KernelKind::kMix ? " from block " + std::to_string(op.src) : "") + " on stream " +
                   std::to_string(s));
  if (check(launch(op, s), Call::kLaunchKernel))
    apply(op);
  else
    mark_unknown(op);
}

// A small host-to-device copy writes a pointer table: up to kTableSlots
// ranges of this thread's data blocks.
void Worker::op_table_write() {
  const int t = pick_block(true);
  if (t >= 0) write_table(t);
}

void Worker::write_table(int t) {
  std::vector<int> data;
  for (const auto& [id, b] : blocks_)
    if (!b.is_table) data.push_back(id);
  Block& table = blocks_.at(t);
  std::vector<TableSlot> slots;
  std::vector<uint32_t> src(kTableBytes / 4, 0);
  auto* entries = reinterpret_cast<TableEntry*>(src.data());
  const size_t count = std::min<size_t>(1 + rand(kTableSlots), data.size());
  for (size_t j = 0; j < count; ++j) {
    const size_t pick = j + rand(data.size() - j);
    std::swap(data[j], data[pick]);
    const Block& target = blocks_.at(data[j]);
    const Range r = pick_range(target, coin(8));
    slots.push_back({data[j], r});
    entries[j] = {target.ptr + r.off * 4, r.n};
  }
  const bool async = coin();
  const int s = async ? pick_stream() : 0;
  order_after(s, table.last_stream);
  table.last_stream = s;
  ++tally_.ops[async ? "table-write-async" : "table-write"];
  note(t, std::string("table write of ") + std::to_string(count) + " slots on stream " + std::to_string(s));
  const CUresult res =
      async ? d_.htod_async(table.ptr, src.data(), kTableBytes, handle(s)) : d_.htod(table.ptr, src.data(), kTableBytes);
  if (!check(res, async ? Call::kCopyAsync : Call::kCopy)) {
    // The table holds its old slots or some of the new: no kernel may
    // read it until it is written again.
    destroy_graphs_naming(t);
    table.unknown = true;
    table.table_valid = false;
    return;
  }
  table.slots = std::move(slots);
  table.mirror = src;
  table.unknown = false;
  table.table_valid = true;
  if (async) pending_host_[s].push_back(std::move(src));
}

void Worker::op_table_kernel() {
  const int t = pick_block(true);
  if (t < 0 || !blocks_.at(t).table_valid) return;
  KernelOp op{KernelKind::kTable, t, -1, {}, {}, static_cast<uint32_t>(rng_())};
  const int s = pick_stream();
  const auto ids = named(op);
  order_for(s, ids);
  used_on(s, ids);
  ++tally_.ops["kernel-table"];
  for (int id : ids) note(id, "table kernel through table " + std::to_string(t) + " on stream " + std::to_string(s));
  if (check(launch(op, s), Call::kLaunchKernel))
    apply(op);
  else
    mark_unknown(op);
}

void Worker::op_verify() {
  const int id = pick_block(coin(5));
  if (id < 0) return;
  const bool async = coin();
  ++tally_.ops[async ? "verify-async" : "verify"];
  read_and_compare(id, pick_range(blocks_.at(id), coin(8)), async ? pick_stream() : 0, async);
}

void Worker::op_stream_sync() {
  ++tally_.ops["stream-sync"];
  synchronize(pick_stream());
}

// A fresh event recorded and waited for: everything before it on the
// stream is done.
void Worker::op_event_sync() {
  const int s = pick_stream();
  CUevent e = nullptr;
  ++tally_.ops["event-sync"];
  if (!check(d_.event_create(&e, CU_EVENT_DISABLE_TIMING), Call::kEventCreate)) return;
  if (check(d_.event_record(e, handle(s)), Call::kEventRecord) &&
      check(d_.event_synchronize(e), Call::kEventSynchronize))
    stream_done(s);
  if (d_.event_destroy(e) != CUDA_SUCCESS) fatal("cuEventDestroy failed");
}

}  // namespace truth
