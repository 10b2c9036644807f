// Pointer -> owner in O(1): a two-level radix table over the VA space, one
// entry per allocation granule. Lookups are lock-free (two acquire loads,
// allocator/granule_view.h); inserts take a mutex only to add a leaf. Leaves
// live until destruction, so a racing lookup never touches freed memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "allocator/granule_view.h"
#include "allocator/ranked_mutex.h"
#include "lock_rank.h"

namespace tierrt::alloc {

class GranuleTable {
 public:
  static constexpr unsigned kVaBits = GranuleView::kVaBits;
  static constexpr unsigned kLeafShift = GranuleView::kLeafShift;

  // granule_shift: log2 of the allocation granularity (at most kLeafShift).
  explicit GranuleTable(unsigned granule_shift) noexcept;
  // False when the top level could not be mapped.
  bool valid() const noexcept { return top_ != nullptr; }
  ~GranuleTable();
  std::size_t leaf_bytes() const noexcept;  // one leaf: its entries
  // What a lookup needs, to copy (valid while the table lives).
  const GranuleView& view() const noexcept { return view_; }
  GranuleTable(const GranuleTable&) = delete;
  GranuleTable& operator=(const GranuleTable&) = delete;

  // Maps every granule of [base, base + len) to value (non-zero). base and
  // len must be granule-aligned. False when the range is outside the table.
  bool insert(std::uintptr_t base, std::size_t len, std::uintptr_t value);
  void erase(std::uintptr_t base, std::size_t len) noexcept;
  // Calls fn(base, len, value) for each maximal run of consecutive granules
  // holding one value, in address order. Entries may change meanwhile: a
  // run is what each entry held when it was read.
  template <class Fn>
  void for_each_run(Fn&& fn) const noexcept {
    std::uintptr_t run_base = 0, run_value = 0, next = 0;
    for (std::size_t top = 0; top < view_.top_entries; ++top) {
      const Entry* leaf = top_[top].load(std::memory_order_acquire);
      if (leaf == nullptr) continue;
      for (std::size_t i = 0; i < leaf_entries_; ++i) {
        const std::uintptr_t at = (std::uintptr_t{top} << kLeafShift) | (std::uintptr_t{i} << view_.shift);
        const std::uintptr_t v = leaf[i].load(std::memory_order_acquire);
        if (run_value != 0 && (v != run_value || at != next)) {
          fn(run_base, static_cast<std::size_t>(next - run_base), run_value);
          run_value = 0;
        }
        if (v != 0 && run_value == 0) run_base = at, run_value = v;
        next = at + (std::uintptr_t{1} << view_.shift);
      }
    }
    if (run_value != 0) fn(run_base, static_cast<std::size_t>(next - run_base), run_value);
  }

  std::uintptr_t find(std::uintptr_t addr) const noexcept { return view_.find(addr); }

 private:
  static constexpr std::size_t kTopEntries = std::size_t{1} << (kVaBits - kLeafShift);
  using Entry = GranuleView::Entry;
  Entry* leaf_for(std::uintptr_t addr);

  // The shift, the leaf mask and the top level's size (kTopEntries once it
  // is mapped, else 0) are the read side's; top_ is its top level, writable.
  GranuleView view_;
  std::size_t leaf_entries_;
  std::atomic<Entry*>* top_ = nullptr;
  // Rank 90 (lock_rank.h), the last: nothing is taken inside it.
  RankedMutex grow_mu_{kRankGranules, "alloc.granules"};
};

}  // namespace tierrt::alloc
