// The host tier: host physical chunks for `remap`, and for `copy` a private
// jemalloc arena over pinned chunks (cuMemHostAlloc), grown outside jemalloc.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "chunk_spares.h"
#include "lock_rank.h"
#include "allocator/ranked_mutex.h"

namespace tierrt::alloc {

class PinnedPool;

class HostTier {
 public:
  HostTier() = default;
  ~HostTier();
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  // remap: where host chunks are created (HOST_NUMA node, or HOST when -1).
  void set_location(CUmemLocationType type, int id) noexcept { loc_type_ = type; loc_id_ = id; }
  // Creates a host physical chunk of `bytes` (a multiple of the granularity).
  CUresult create_host_chunk(std::size_t bytes, CUmemGenericAllocationHandle* out) noexcept;
  // The same from a small pool of unmapped chunks kept for reuse (their
  // pages are already faulted in), and back to it (released when it is full).
  CUresult take_host_chunk(std::size_t bytes, CUmemGenericAllocationHandle* out) noexcept;
  void give_host_chunk(CUmemGenericAllocationHandle h, std::size_t bytes) noexcept;
  void set_spare_limit(std::uint64_t bytes) noexcept { spares_.set_limit(bytes); }

  // copy: a pinned buffer of at least `bytes` from the private arena; grows
  // the pool by whole chunks while it stays within `pool_limit`. Null when
  // the pool cannot grow.
  void configure_pool(std::size_t chunk_bytes, std::uint64_t pool_limit) noexcept;
  void* alloc_pinned(std::size_t bytes) noexcept;
  void free_pinned(void* p) noexcept;
  std::uint64_t pinned_pool_bytes() const noexcept;
  // Releases the arena and the pinned chunks (every buffer must be freed).
  void shutdown() noexcept;

 private:
  CUmemLocationType loc_type_ = CU_MEM_LOCATION_TYPE_HOST;
  int loc_id_ = 0;
  // Rank 60 (lock_rank.h): held while jemalloc carves from the pinned pool
  // (alloc.pinned_pool) and while the pool grows.
  mutable RankedMutex mu_{kRankHostTier, "alloc.host_tier"};
  PinnedPool* pool_ = nullptr;
  std::size_t chunk_bytes_ = 64u << 20;
  std::uint64_t pool_limit_ = UINT64_MAX;
  ChunkSpares spares_;
};

}  // namespace tierrt::alloc
