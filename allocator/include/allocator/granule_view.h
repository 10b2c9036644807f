// The granule table's read side (allocator/granule_table.h): what a lookup
// needs, copied by value into whoever looks up on a hot path. The launch
// path looks up every pointer a kernel is given; through the table's owner
// that was a call and a chain of six dependent loads per pointer, inline
// from a copy it is two (the leaf, then its entry). The top level and the
// leaves never move while the table lives, so a copy stays valid as long.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tierrt::alloc {

// An entry with this bit set is a small-allocation slab's (allocator/slab_pools.h),
// without it a block's.
inline constexpr std::uintptr_t kSlabEntryTag = 1;

struct GranuleView {
  static constexpr unsigned kVaBits = 48;
  static constexpr unsigned kLeafShift = 30;  // one leaf covers 1 GiB
  using Entry = std::atomic<std::uintptr_t>;

  // Each top-level entry: its leaf's entries, or null where none was made.
  const std::atomic<Entry*>* top = nullptr;
  std::size_t top_entries = 0;  // 0 when the top level could not be made
  unsigned shift = 0;           // log2 of the granule
  std::uintptr_t leaf_mask = 0;

  // The entry of the granule holding `addr`; 0 when there is none.
  std::uintptr_t find(std::uintptr_t addr) const noexcept {
    const std::uintptr_t t = addr >> kLeafShift;
    if (t >= top_entries) [[unlikely]] return 0;
    const Entry* leaf = top[t].load(std::memory_order_acquire);
    if (leaf == nullptr) [[unlikely]] return 0;
    return leaf[(addr >> shift) & leaf_mask].load(std::memory_order_acquire);
  }
};

}  // namespace tierrt::alloc
