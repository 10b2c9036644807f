// Small allocations: 2 MiB (or one-granule) device ranges cut into equal
// slots of one power-of-two size, one pool per size shared by every stream.
// Slots are never spilled.
//
// Uses: each slab carries a Block (Block::slab) on which the runtime records
// the uses of its slots, one slot per stream, as it does for blocks. A freed
// slot keeps a copy of those uses and is handed out again only once they
// completed (a cuEventQuery poll at the next allocation), or at once to a
// stream-ordered allocation whose stream then waits for them on the device.
// An empty slab goes back to the device once nothing uses it, keeping one
// per size for the next allocation; release_empty() returns all of them.
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <vector>

#include <boost/intrusive/list.hpp>

#include "allocator/block.h"
#include "device_arena.h"
#include "lock_rank.h"
#include "allocator/ranked_mutex.h"
#include "use_tracker.h"

namespace tierrt::alloc {

struct Slab {
  DeviceRange range;
  unsigned size_shift = 0;     // slot size = 1 << size_shift
  bool live = false;           // holds a range; else a spare object (type-stable)
  // Bumped each time the object takes a new range: a slab seen outside mu_
  // is acted on later only if it is still in the life it was seen in.
  std::uint64_t generation = 0;
  std::uint32_t handed_out = 0;  // slots the application holds
  std::uint32_t pending = 0;     // freed slots waiting for their uses
  std::vector<std::uint32_t> free_slots;  // slots nothing may still use
  std::vector<std::uint64_t> taken;       // one bit per slot: handed out
  Block uses;                             // the uses recorded on its slots
  bi::list_member_hook<> hook;            // its pool's live slabs
  bi::list_member_hook<> partial_hook;    // its pool's slabs with a free slot

  bool empty() const noexcept { return handed_out == 0 && pending == 0; }
};

class SlabPools {
 public:
  static constexpr unsigned kMinShift = 9;   // 512 B
  static constexpr unsigned kMaxShift = 20;  // 1 MiB

  SlabPools(DeviceArena& arena, UseTracker& uses) noexcept : arena_(arena), uses_(uses) {}
  SlabPools(const SlabPools&) = delete;
  SlabPools& operator=(const SlabPools&) = delete;
  ~SlabPools();  // returns every slab to the driver

  static bool fits(std::size_t bytes) noexcept { return bytes <= (std::size_t{1} << kMaxShift); }
  // Granule-table entries of slabs carry this tag; block entries do not.
  static bool is_slab(std::uintptr_t entry) noexcept { return (entry & kTag) != 0; }
  static Slab* slab_of(std::uintptr_t entry) noexcept { return reinterpret_cast<Slab*>(entry & ~kTag); }

  CUresult allocate(CUdeviceptr* out, std::size_t bytes, CUstream s) noexcept;
  // CUDA_ERROR_INVALID_VALUE for anything but the start of a slot handed out.
  CUresult free(Slab* slab, CUdeviceptr p, CUstream s) noexcept;
  // Returns every empty slab nothing uses any more to the device (polling
  // freed slots first; with `wait`, waiting for their uses on the host);
  // the bytes released.
  std::uint64_t release_empty(bool wait) noexcept;

  std::uint64_t bytes() const noexcept { return bytes_.load(std::memory_order_relaxed); }
  std::uint64_t slabs_made() const noexcept { return made_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::uintptr_t kTag = kSlabEntryTag;
  static constexpr std::size_t kPollBatch = 32;  // freed slots queried per allocation
  using SlabList = bi::list<Slab, bi::member_hook<Slab, bi::list_member_hook<>, &Slab::hook>>;
  using PartialList = bi::list<Slab, bi::member_hook<Slab, bi::list_member_hook<>, &Slab::partial_hook>>;
  // A freed slot and the uses recorded on its slab when it was freed.
  struct Pending {
    Slab* slab = nullptr;
    std::uint32_t idx = 0;
    CUstream freed_on = nullptr;
    int nuses = 0;
    UseSlot uses[kMaxUses];
  };
  struct Pool {
    SlabList slabs;
    PartialList partial;
    std::deque<Pending> pending;  // oldest first
    bool growing = false;         // a thread is making a slab of this size
  };

  // A free slot, or a freed one usable on `s` once its uses are waited for;
  // false when there is none (or no wait could be arranged).
  bool take_freed(unsigned shift, CUstream s, CUdeviceptr* out) noexcept;
  CUdeviceptr take_free_locked(Pool& p) noexcept;
  void give_free_locked(Pool& p, Slab* sl, std::uint32_t idx) noexcept;
  // Makes `s` wait for the uses of a slot freed earlier (a stream-ordered
  // reuse); the references stay the caller's.
  CUresult wait_for_reuse(const Pending& e, CUstream s) noexcept;
  // Frees those of the `most` oldest freed slots of `shift` whose uses
  // completed (with `wait`: once they did).
  void retire(unsigned shift, std::size_t most, bool wait) noexcept;
  // Returns the empty, idle slabs of `shift` beyond `keep` to the device.
  std::uint64_t release(unsigned shift, std::size_t keep, bool wait) noexcept;
  // A new live slab in its pool, with slot 0 handed out.
  CUresult new_slab(unsigned shift, Slab** out) noexcept;
  void forget_pending(Pending& e) noexcept;

  DeviceArena& arena_;
  UseTracker& uses_;
  // Rank 20 (lock_rank.h): alloc.uses is taken inside it; released before a
  // slab is made or returned (which may rescue, taking alloc.blocks).
  RankedMutex mu_{kRankSlabs, "alloc.slabs"};
  std::condition_variable_any grown_;  // a pool's new slab is ready (or failed)
  Pool pools_[kMaxShift + 1];  // by slot size shift
  std::deque<Slab> storage_;   // type-stable: lookups may still hold a slab
  std::vector<Slab*> spare_objects_;
  std::atomic<std::uint64_t> bytes_{0}, made_{0};
};

}  // namespace tierrt::alloc
