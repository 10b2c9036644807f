// Which of tierrt's allocations hold pointers to its blocks, as far as the
// copies that filled them show: a kernel that reads a pointer table (cuBLAS
// batched-GEMM arrays, a work queue) reaches blocks no parameter word names.
//
// A table is kept per destination *unit*: a block (by its Block object,
// which is never deleted, so any address in the block names it and no field
// of it is read) or a small-allocation slot (by the exact address a copy
// wrote to, since slot bounds are the allocator's; device addresses and the
// allocator's host objects never coincide under unified addressing). It
// holds the blocks it points to. A free drops the freed unit's table and
// the freed block from every table, so what a table holds was live when it
// was last looked at; the caller checks each block's state on use. A copy
// that overwrites every word a table found replaces it; one that covers
// part adds to it. A table that would point to more than kTargets blocks
// points to "every block".
//
// One plain mutex (a leaf, never held across a driver call) guards the
// table; work that names nothing while no table exists pays one atomic load.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>

#include "allocator/ranked_mutex.h"
#include "runtime/lock_rank.h"

namespace tierrt {

class PointerTables {
 public:
  using Unit = std::uintptr_t;  // a Block* or a slot's address; 0: none
  static constexpr int kTargets = 32;
  static constexpr std::uint32_t kSlots = 2048;  // a power of two
  static constexpr std::uint32_t kMaxTables = kSlots / 2;

  // No table exists (and none was ever lost): nothing to look up.
  bool empty() const noexcept { return live_.load(std::memory_order_acquire) == 0; }

  // A copy wrote [begin, end) of `unit`; `targets` are the blocks the words
  // it wrote point to (`every`: every block), and [found_begin, found_end)
  // the span of those words.
  void wrote(Unit unit, CUdeviceptr begin, CUdeviceptr end, std::span<const Unit> targets, CUdeviceptr found_begin,
             CUdeviceptr found_end, bool every) noexcept;
  // What `unit` points to, under lock(): `visit` gets each target block;
  // false when it points to every block, or when a table was lost (one that
  // could not be kept may have been this unit's).
  std::unique_lock<RankedMutex> lock() const noexcept { return std::unique_lock(mu_); }
  template <class Visit>
  bool targets_of(Unit unit, Visit&& visit, const std::unique_lock<RankedMutex>&) const noexcept;
  // A copy from [begin, end) of `src` to `dst_unit` at `dst`: the
  // destination now points where the source's copied words did.
  void copied(Unit src_unit, CUdeviceptr begin, CUdeviceptr end, Unit dst_unit, CUdeviceptr dst) noexcept;
  // `unit` is being freed: its table is dropped and no table points to it.
  void forget(Unit unit) noexcept;

 private:
  struct Table {
    Unit unit = 0;  // 0: free slot
    CUdeviceptr lo = 0, hi = 0;  // the span of the words found
    int n = 0;
    bool every = false;
    Unit targets[kTargets];
  };
  Table* find_locked(Unit unit) noexcept;
  const Table* find_locked(Unit unit) const noexcept;
  Table* insert_locked(Unit unit) noexcept;  // null: full
  void erase_locked(Table* t) noexcept;
  static void add_locked(Table* t, Unit target) noexcept;

  mutable RankedMutex mu_{kRankPointerTables, "runtime.pointer_tables"};
  Table slots_[kSlots];
  std::uint32_t count_ = 0;
  std::atomic<std::uint32_t> live_{0};  // count_, or more once a table was lost
  std::atomic<bool> lost_{false};  // a table could not be kept (full): sticky
};

template <class Visit>
bool PointerTables::targets_of(Unit unit, Visit&& visit, const std::unique_lock<RankedMutex>&) const noexcept {
  const Table* t = find_locked(unit);
  if (t == nullptr) return !lost_.load(std::memory_order_relaxed);
  if (t->every) return false;
  for (int i = 0; i < t->n; ++i) visit(t->targets[i]);
  return true;
}

}  // namespace tierrt
