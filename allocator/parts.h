// Internal: what the Allocator facade composes, each part with one job:
//   DeviceArena  address ranges, device chunks and spares, the device budget
//   UseTracker   use events per block and stream, copy timers
//   HostBacking  where spilled bytes live (remap or copy)
//   BlockStates  the state machine, the resident list, the cache
//   SlabPools    small allocations
//   Mover        spills and fetches, and the thread that finalises them
// and the rescue (rescue.cpp), which gives device memory back when a
// reservation does not fit. Member order is destruction order, reversed.
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <unordered_set>
#include <vector>

#include "allocator/allocator.h"
#include "driver/driver.h"
#include "block_states.h"
#include "device_arena.h"
#include "group_pool.h"
#include "parked_groups.h"
#include "host_backing.h"
#include "mover.h"
#include "slab_pools.h"
#include "use_tracker.h"

namespace tierrt::alloc {

// A launch naming b's group (b: its use record) released (residency.cpp).
void note_enqueued(Block* b) noexcept;

struct Allocator::Parts final : Reclaimer, ChunkDonors {
  explicit Parts(const Options& o) noexcept : opt(o) {}
  ~Parts();
  CUresult init() noexcept;

  // allocator.cpp
  CUresult allocate_raw(CUdeviceptr* out, std::size_t bytes) noexcept;
  CUresult free_raw(CUdeviceptr p) noexcept;
  CUresult allocate_block(CUdeviceptr* out, std::size_t bytes, CUstream s, bool spillable) noexcept;
  CUresult reuse_cached(std::size_t mapped, std::size_t bytes, bool spillable, CUstream s, Block** out) noexcept;
  // Not stream-ordered: a cached block none of whose uses may still run.
  CUresult reuse_idle(std::size_t mapped, std::size_t bytes, bool spillable, Block** out) noexcept;
  CUresult create_block(std::size_t mapped, std::size_t bytes, bool spillable, Block** out) noexcept;
  CUresult free_block(Block* b, CUdeviceptr p, CUstream s) noexcept;
  // Waits out a fetch (its copy becomes a use) and a move's end, so that what
  // is left is RESIDENT, SPILLED or FREED (*st); an error: the block stays.
  CUresult settle_for_free(Block* b, BlockStates::Lock& l, State* st) noexcept;
  // Releases everything the block holds; it must be out of every list.
  void destroy_block(Block* b) noexcept;

  // granule_groups.cpp: large allocations tiered per member.
  bool grouping() const noexcept;
  CUresult allocate_group(CUdeviceptr* out, std::size_t bytes) noexcept;
  CUresult free_group(Group* g, CUdeviceptr p) noexcept;
  // Parked groups (parked_groups.h) released, oldest first, until their
  // chunks held `bytes` (or all); the bytes released.
  std::uint64_t release_parked(std::uint64_t bytes) noexcept;
  // Unmaps and releases its chunks (their bytes go back to the budget) and
  // frees its range.
  void release_parked_group(ParkedGroup& pg) noexcept;
  // Unmaps its chunks from member `from` on, each to the spares (`release`:
  // back to the driver, its bytes to the budget); false when one could not
  // be unmapped (it stays mapped there, and the range with it).
  bool unmap_parked_chunks(ParkedGroup& pg, std::size_t from, bool release) noexcept;
  // An untouched member's first use: a device chunk mapped at its VA, the
  // member RESIDENT (or another thread did it meanwhile). Without the lock.
  // `host_if_full`: for its group's first launch, on the host where the
  // device has no room without a rescue (place_on_host).
  CUresult touch_member(Block* b, std::span<Block* const> pinned, bool host_if_full = false) noexcept;
  CUresult place_on_host(Block* b) noexcept;
  // The first launch naming a group maps every member not yet mapped.
  CUresult touch_group(Group* g) noexcept;
  // A member's chunk and table entries go; the group's VA range stays.
  void destroy_member(Block* b) noexcept;

  // residency.cpp: the slow path of ensure_resident, for one block;
  // `pinned`: the launch's blocks pinned already.
  CUresult make_resident(Block* b, CUstream s, std::span<Block* const> pinned) noexcept;
  CUresult pin_when_usable(Block* b, std::span<Block* const> pinned, UseEvent** ready) noexcept;
  void note_late_fetch(Block* b, UseEvent* ready, CUstream s) noexcept;
  // The groups' use records of a launch's list pinned, past their fences.
  CUresult pin_groups(std::span<Block* const> list, CUstream s) noexcept;
  // Unpins the list's group records (`records`) or its other blocks.
  void release_pinned(std::span<Block* const> list, bool records) noexcept;

  // Empty slabs back to the device, once the work that used them completed
  // (the rescue waits for it); the bytes released.
  std::uint64_t release_empty_slabs() noexcept { return slabs.release_empty(/*wait=*/true); }

  // rescue.cpp
  bool make_room(std::uint64_t bytes, const Claimant& who) noexcept override;
  void over_budget(std::uint64_t used, std::uint64_t limit) noexcept override;
  // `held`: the resident blocks it passed over because a launch held them
  // (their release is what the rescue then waits for).
  bool spill_coldest(std::uint64_t bytes, std::vector<Block*>* held) noexcept;
  std::uint64_t trim(std::uint64_t bytes) noexcept;

  // chunk_handover.cpp
  bool donate(std::size_t bytes, CUstream waiter, CUmemGenericAllocationHandle* chunk,
              Block** donor) noexcept override;
  void take_back(Block* donor, CUmemGenericAllocationHandle chunk) noexcept override;
  void retire(Block* donor) noexcept override;

  const Options opt;
  DeviceArena arena;
  UseTracker uses;
  std::unique_ptr<HostBacking> backing;
  BlockStates blocks;
  SlabPools slabs{arena, uses};
  std::unique_ptr<Mover> mover;
  GroupPool groups;  // guarded by alloc.blocks
  ParkedGroups parked;  // guarded by alloc.blocks
  std::uint64_t live_groups = 0, untouched_bytes = 0;  // guarded by alloc.blocks
  std::uint64_t steps_ended = 0;                       // guarded by alloc.blocks

  // Rank 10 (lock_rank.h): nothing is taken inside it.
  RankedMutex raw_mu{kRankPassThrough, "alloc.pass_through"};
  std::unordered_set<CUdeviceptr> raw;  // pass-through allocations

  std::atomic<std::uint64_t> allocs{0}, cache_hits{0}, blocks_made{0}, trimmed{0};
  std::atomic<bool> told_over_budget{false};
};

}  // namespace tierrt::alloc
