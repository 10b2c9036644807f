// The host tier: host physical chunks for `remap`, and for `copy` a private
// jemalloc arena over pinned chunks (on the device's NUMA node where it has
// one: pinned_chunk.h), grown outside jemalloc.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "chunk_spares.h"
#include "lock_rank.h"
#include "allocator/ranked_mutex.h"

namespace tierrt::alloc {

class PinnedPool;
struct Stats;

class HostTier {
 public:
  HostTier() = default;
  ~HostTier();
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  // remap: where host chunks are created (HOST_NUMA node, or HOST when -1).
  void set_location(CUmemLocationType type, int id) noexcept {
    remap_ = true;
    loc_type_ = type;
    loc_id_ = id;
  }
  // Creates a host physical chunk of `bytes` (a multiple of the granularity).
  CUresult create_host_chunk(std::size_t bytes, CUmemGenericAllocationHandle* out) noexcept;
  // The same from a small pool of unmapped chunks kept for reuse (their
  // pages are already faulted in), and back to it (released when it is full).
  CUresult take_host_chunk(std::size_t bytes, CUmemGenericAllocationHandle* out) noexcept;
  void give_host_chunk(CUmemGenericAllocationHandle h, std::size_t bytes) noexcept;
  // A host chunk of this tier's that is not kept (the driver frees it once
  // nothing maps it any more).
  void release_host_chunk(CUmemGenericAllocationHandle h, std::size_t bytes) noexcept;
  void set_spare_limit(std::uint64_t bytes) noexcept { spares_.set_limit(bytes); }

  // copy: a pinned buffer of at least `bytes` from the private arena; grows
  // the pool by whole chunks while it stays within `pool_limit`. Null when
  // the pool cannot grow.
  void configure_pool(std::size_t chunk_bytes, std::uint64_t pool_limit) noexcept;
  // copy: pinned chunks go to `node` (the device's; -1: it names none). A
  // node this host cannot use, or a device that cannot register host memory,
  // is given up here, and so is the node when a chunk cannot be bound or
  // registered later: chunks then go wherever the kernel puts them.
  void place_pinned_on(int node, bool can_register) noexcept;
  void* alloc_pinned(std::size_t bytes) noexcept;
  void free_pinned(void* p) noexcept;
  std::uint64_t pinned_pool_bytes() const noexcept;
  // Where the tier's memory is, and how much of it (the Stats::host_node* fields).
  void fill_placement(Stats* s) const noexcept;
  // Releases the arena and the pinned chunks (every buffer must be freed).
  void shutdown() noexcept;

 private:
  bool remap_ = false;
  CUmemLocationType loc_type_ = CU_MEM_LOCATION_TYPE_HOST;
  int loc_id_ = 0;
  std::atomic<std::uint64_t> host_chunk_bytes_{0};  // remap: host chunks alive (mapped or spare)
  // Rank 60 (lock_rank.h): held while jemalloc carves from the pinned pool
  // (alloc.pinned_pool) and while the pool grows.
  mutable RankedMutex mu_{kRankHostTier, "alloc.host_tier"};
  PinnedPool* pool_ = nullptr;
  std::size_t chunk_bytes_ = 64u << 20;
  std::uint64_t pool_limit_ = UINT64_MAX;
  // copy, under mu_: the device's node, whether chunks are still bound to
  // it, why not, and where the pinned bytes went.
  int pin_node_ = -1;
  bool placing_ = false;
  const char* node_problem_ = nullptr;
  std::uint64_t on_node_bytes_ = 0, unplaced_bytes_ = 0;
  ChunkSpares spares_;
};

}  // namespace tierrt::alloc
