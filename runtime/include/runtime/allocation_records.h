// What the engine handed out, as the application sees it: each live
// allocation's base, the size it asked for and a buffer id of its own. The
// allocator's blocks and slab slots outlive allocations (a freed block is
// cached and handed out again at the same address; a slab holds many slots),
// so pointer queries answer from here.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "allocator/ranked_mutex.h"
#include "runtime/lock_rank.h"

namespace tierrt {

struct AllocationRecord {
  CUdeviceptr base = 0;
  std::size_t bytes = 0;
  unsigned long long buffer_id = 0;
};

class AllocationRecords {
 public:
  // A new allocation at `base`; false when it could not be recorded (no
  // memory for the entry).
  bool add(CUdeviceptr base, std::size_t bytes) noexcept;
  void remove(CUdeviceptr base) noexcept;
  // The live allocation holding `p`.
  bool find(CUdeviceptr p, AllocationRecord* out) const noexcept;

 private:
  // The driver numbers its buffers from 1; ids with the top bit set are
  // never the driver's, so no tiered allocation shares an id with an
  // untiered one.
  static constexpr unsigned long long kIdBase = 1ull << 63;

  mutable RankedMutex mu_{kRankAllocations, "runtime.allocations"};  // a leaf: nothing is taken inside it
  std::map<CUdeviceptr, AllocationRecord> by_base_;
  unsigned long long next_id_ = kIdBase + 1;
};

}  // namespace tierrt
