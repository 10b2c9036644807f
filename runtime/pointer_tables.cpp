#include "runtime/pointer_tables.h"

#include <algorithm>

namespace tierrt {

namespace {

std::uint32_t home_of(PointerTables::Unit unit) noexcept {
  return static_cast<std::uint32_t>((unit * 0x9E3779B97F4A7C15ull) >> 40) & (PointerTables::kSlots - 1);
}

}  // namespace

PointerTables::Table* PointerTables::find_locked(Unit unit) noexcept {
  for (std::uint32_t i = home_of(unit);; i = (i + 1) & (kSlots - 1)) {
    if (slots_[i].unit == unit) return &slots_[i];
    if (slots_[i].unit == 0) return nullptr;
  }
}

const PointerTables::Table* PointerTables::find_locked(Unit unit) const noexcept {
  return const_cast<PointerTables*>(this)->find_locked(unit);
}

PointerTables::Table* PointerTables::insert_locked(Unit unit) noexcept {
  if (count_ == kMaxTables) {
    lost_.store(true, std::memory_order_release);
    live_.store(kMaxTables + 1, std::memory_order_release);
    return nullptr;
  }
  std::uint32_t i = home_of(unit);
  while (slots_[i].unit != 0) i = (i + 1) & (kSlots - 1);
  slots_[i] = Table{};
  slots_[i].unit = unit;
  ++count_;
  if (!lost_.load(std::memory_order_relaxed)) live_.store(count_, std::memory_order_release);
  return &slots_[i];
}

// Linear probing without tombstones: the tables after the hole that would
// no longer be found move back into it.
void PointerTables::erase_locked(Table* t) noexcept {
  std::uint32_t hole = static_cast<std::uint32_t>(t - slots_);
  for (std::uint32_t i = (hole + 1) & (kSlots - 1); slots_[i].unit != 0; i = (i + 1) & (kSlots - 1)) {
    const std::uint32_t home = home_of(slots_[i].unit);
    // Movable when its home is not cyclically within (hole, i].
    const bool home_after_hole = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
    if (home_after_hole) continue;
    slots_[hole] = slots_[i];
    hole = i;
  }
  slots_[hole].unit = 0;
  --count_;
  if (!lost_.load(std::memory_order_relaxed)) live_.store(count_, std::memory_order_release);
}

void PointerTables::add_locked(Table* t, Unit target) noexcept {
  if (t->every) return;
  for (int i = 0; i < t->n; ++i)
    if (t->targets[i] == target) return;
  if (t->n == kTargets) {
    t->every = true;
    return;
  }
  t->targets[t->n++] = target;
}

void PointerTables::wrote(Unit unit, CUdeviceptr begin, CUdeviceptr end, std::span<const Unit> targets,
                          CUdeviceptr found_begin, CUdeviceptr found_end, bool every) noexcept {
  const bool found = every || !targets.empty();
  if (!found && empty()) return;
  std::lock_guard lock(mu_);
  Table* t = find_locked(unit);
  if (t != nullptr && begin <= t->lo && t->hi <= end) {
    // Every word it had found is overwritten.
    erase_locked(t);
    t = nullptr;
  }
  if (!found) return;
  if (t == nullptr) {
    if ((t = insert_locked(unit)) == nullptr) return;
    t->lo = found_begin, t->hi = found_end;
  } else {
    t->lo = std::min(t->lo, found_begin), t->hi = std::max(t->hi, found_end);
  }
  if (every) t->every = true;
  for (Unit target : targets) add_locked(t, target);
}

void PointerTables::copied(Unit src_unit, CUdeviceptr begin, CUdeviceptr end, Unit dst_unit, CUdeviceptr dst) noexcept {
  if (empty()) return;
  Unit targets[kTargets];
  int n = 0;
  bool every = false;
  CUdeviceptr lo = 0, hi = 0;
  {
    std::lock_guard lock(mu_);
    if (const Table* t = find_locked(src_unit); t != nullptr && t->lo < end && begin < t->hi) {
      every = t->every;
      n = t->n;
      std::copy(t->targets, t->targets + n, targets);
      lo = dst + (std::max(t->lo, begin) - begin);
      hi = dst + (std::min(t->hi, end) - begin);
    }
  }
  wrote(dst_unit, dst, dst + (end - begin), std::span<const Unit>(targets, static_cast<std::size_t>(n)), lo, hi, every);
}

void PointerTables::forget(Unit unit) noexcept {
  if (empty()) return;
  std::lock_guard lock(mu_);
  if (Table* t = find_locked(unit)) erase_locked(t);
  for (Table& t : slots_) {
    if (t.unit == 0) continue;
    for (int i = 0; i < t.n;)
      if (t.targets[i] == unit) t.targets[i] = t.targets[--t.n];
      else ++i;
  }
}

}  // namespace tierrt
