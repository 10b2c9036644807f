// Which of tierrt's allocations hold pointers to its blocks, as far as the
// copies that filled them show: a kernel that reads a pointer table (cuBLAS
// batched-GEMM arrays, a work queue) reaches blocks no parameter word names.
//
// A table is kept per destination *unit*: a block (by its base address, so
// any address in it names it) or a small-allocation slot (by the exact
// address a copy wrote to, since slot bounds are the allocator's). It holds
// the base addresses of the blocks it points to, looked up again on use, so
// a block freed since is simply not found. A copy that overwrites every word
// a table found replaces it; one that covers part adds to it. A table that
// would point to more than kTargets blocks points to "every block".
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

namespace tierrt {

class PointerTables {
 public:
  static constexpr int kTargets = 32;
  static constexpr std::uint32_t kSlots = 2048;  // a power of two
  static constexpr std::uint32_t kMaxTables = kSlots / 2;

  // No table exists (and none was ever lost): nothing to look up.
  bool empty() const noexcept { return live_.load(std::memory_order_acquire) == 0; }

  // A copy wrote [begin, end) of `unit`; `targets` are the bases of the
  // blocks the words it wrote point to (`every`: to every block), and
  // [found_begin, found_end) the span of those words.
  void wrote(CUdeviceptr unit, CUdeviceptr begin, CUdeviceptr end, std::span<const CUdeviceptr> targets,
             CUdeviceptr found_begin, CUdeviceptr found_end, bool every) noexcept;
  // What `unit` points to, under lock(): `visit` gets each target's base;
  // false when it points to every block, or when a table was lost (one that
  // could not be kept may have been this unit's).
  std::unique_lock<std::mutex> lock() const noexcept { return std::unique_lock(mu_); }
  template <class Visit>
  bool targets_of(CUdeviceptr unit, Visit&& visit, const std::unique_lock<std::mutex>&) const noexcept;
  // A copy from [begin, end) of `src` to `dst_unit` at `dst`: the
  // destination now points where the source's copied words did.
  void copied(CUdeviceptr src_unit, CUdeviceptr begin, CUdeviceptr end, CUdeviceptr dst_unit, CUdeviceptr dst) noexcept;
  // `unit` was freed, or the block at [base, base + bytes) (base == unit):
  // its table is dropped and no table points to it any more.
  void forget(CUdeviceptr unit, std::size_t bytes) noexcept;

 private:
  struct Table {
    CUdeviceptr unit = 0;  // 0: free slot
    CUdeviceptr lo = 0, hi = 0;  // the span of the words found
    int n = 0;
    bool every = false;
    CUdeviceptr targets[kTargets];
  };
  Table* find_locked(CUdeviceptr unit) noexcept;
  const Table* find_locked(CUdeviceptr unit) const noexcept;
  Table* insert_locked(CUdeviceptr unit) noexcept;  // null: full
  void erase_locked(Table* t) noexcept;
  static void add_locked(Table* t, CUdeviceptr target) noexcept;

  mutable std::mutex mu_;
  Table slots_[kSlots];
  std::uint32_t count_ = 0;
  std::atomic<std::uint32_t> live_{0};  // count_, or more once a table was lost
  std::atomic<bool> lost_{false};  // a table could not be kept (full): sticky
};

template <class Visit>
bool PointerTables::targets_of(CUdeviceptr unit, Visit&& visit, const std::unique_lock<std::mutex>&) const noexcept {
  const Table* t = find_locked(unit);
  if (t == nullptr) return !lost_.load(std::memory_order_relaxed);
  if (t->every) return false;
  for (int i = 0; i < t->n; ++i) visit(t->targets[i]);
  return true;
}

}  // namespace tierrt
