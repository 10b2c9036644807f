// Small allocations: 2 MiB (or one-granule) device ranges cut into equal
// slots of one power-of-two size, one pool per (size, stream) so that a slot
// is reused on the stream that freed it. Slots are never spilled.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <boost/intrusive/list.hpp>

#include "device_arena.h"
#include "lock_rank.h"
#include "ranked_mutex.h"

namespace tierrt::alloc {

struct Slab {
  DeviceRange range;
  unsigned size_shift = 0;     // slot size = 1 << size_shift
  CUstream stream = nullptr;   // slots are reused on this stream
  std::vector<std::uint32_t> free_slots;
  bi::list_member_hook<> hook;  // in its pool's list of slabs with free slots
};

class SlabPools {
 public:
  static constexpr unsigned kMinShift = 9;   // 512 B
  static constexpr unsigned kMaxShift = 20;  // 1 MiB

  explicit SlabPools(DeviceArena& arena) noexcept : arena_(arena) {}
  SlabPools(const SlabPools&) = delete;
  SlabPools& operator=(const SlabPools&) = delete;
  ~SlabPools();  // returns every slab to the driver

  static bool fits(std::size_t bytes) noexcept { return bytes <= (std::size_t{1} << kMaxShift); }
  // Granule-table entries of slabs carry this tag; block entries do not.
  static bool is_slab(std::uintptr_t entry) noexcept { return (entry & kTag) != 0; }
  static Slab* slab_of(std::uintptr_t entry) noexcept { return reinterpret_cast<Slab*>(entry & ~kTag); }

  CUresult allocate(CUdeviceptr* out, std::size_t bytes, CUstream s) noexcept;
  void free(Slab* slab, CUdeviceptr p) noexcept;

  std::uint64_t bytes() const noexcept { return bytes_.load(std::memory_order_relaxed); }
  std::uint64_t slabs_made() const noexcept { return made_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::uintptr_t kTag = 1;
  using SlabList = bi::list<Slab, bi::member_hook<Slab, bi::list_member_hook<>, &Slab::hook>>;
  struct Pool {
    CUstream stream;
    SlabList partial;  // slabs with a free slot
  };

  Pool* pool_locked(unsigned shift, CUstream s) noexcept;
  CUresult new_slab(unsigned shift, CUstream s, Slab** out) noexcept;

  DeviceArena& arena_;
  // Rank 20 (lock_rank.h): released before a new slab is made (which may
  // rescue, taking alloc.blocks).
  RankedMutex mu_{kRankSlabs, "alloc.slabs"};
  std::vector<std::unique_ptr<Pool>> pools_[kMaxShift + 1];  // by slot size shift
  std::vector<Slab*> slabs_;
  std::atomic<std::uint64_t> bytes_{0}, made_{0};
};

}  // namespace tierrt::alloc
