// Freed granule groups kept for the next allocation of the same size, with
// the device chunks of their resident members still mapped at their VAs. A
// program that allocates its step's temporaries anew each step (XLA without
// preallocation) gets its range back with those members resident: no range
// is reserved, no chunk mapped and no member placed on the host again. The
// bytes of a freed allocation are undefined, so what the chunks hold does
// not matter; every use of the group was waited for before it was parked.
// The chunks stay held against the budget, as spares do, and the rescue's
// trim releases parked groups right after the spares (Parts::release_parked).
// Guarded by alloc.blocks.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

namespace tierrt::alloc {

struct ParkedGroup {
  CUdeviceptr va = 0;
  std::size_t bytes = 0, mapped = 0, unit = 0;  // the group's, as Group has them
  std::vector<CUmemGenericAllocationHandle> chunks;  // per member: mapped at its VA; 0: none
  std::uint64_t chunk_bytes = 0;                     // what the chunks hold against the budget
  // Member i's part of the range (the last one takes the rest).
  std::size_t member_bytes(std::size_t i) const noexcept {
    const std::size_t off = i * unit;
    return mapped - off < unit ? mapped - off : unit;
  }
};

class ParkedGroups {
 public:
  // More than this many parked: the oldest goes.
  static constexpr std::size_t kMax = 2;

  // The group parked for an allocation of `bytes` laid out in `unit`s, if
  // any (the newest).
  bool take(std::size_t bytes, std::size_t unit, ParkedGroup* out) noexcept {
    for (auto it = parked_.rbegin(); it != parked_.rend(); ++it) {
      if (it->bytes != bytes || it->unit != unit) continue;
      *out = std::move(*it);
      bytes_ -= out->chunk_bytes;
      parked_.erase(std::next(it).base());
      return true;
    }
    return false;
  }
  // Parks `pg`; false when there is no memory to (`pg` is left as it was).
  // `evicted` gets the oldest ones beyond kMax, for the caller to release.
  bool park(ParkedGroup& pg, std::vector<ParkedGroup>* evicted) noexcept {
    try {
      parked_.push_back(std::move(pg));
    } catch (...) {
      return false;
    }
    bytes_ += parked_.back().chunk_bytes;
    while (parked_.size() > kMax && take_oldest(evicted)) {
    }
    return true;
  }
  // Takes out the oldest; false when none is parked or there is no memory
  // to hand it over.
  bool take_oldest(std::vector<ParkedGroup>* out) noexcept {
    if (parked_.empty()) return false;
    try {
      out->push_back(std::move(parked_.front()));
    } catch (...) {
      return false;
    }
    bytes_ -= out->back().chunk_bytes;
    parked_.pop_front();
    return true;
  }
  std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  std::deque<ParkedGroup> parked_;  // oldest first
  std::uint64_t bytes_ = 0;
};

}  // namespace tierrt::alloc
