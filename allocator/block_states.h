// Every block's state and what depends on it: the Block objects themselves,
// the state machine (set_state is the only writer of Block::state), the
// per-state counts, the list of resident spillable blocks, the cache of
// freed blocks, the moves under way, and the notification the rescue and
// the waiters for a remap sleep on. Everything here is guarded by one lock,
// alloc.blocks.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <vector>

#include <boost/intrusive/list.hpp>

#include "allocator/allocator.h"
#include "allocator/block.h"
#include "block_cache.h"
#include "block_storage.h"
#include "lock_rank.h"
#include "allocator/ranked_mutex.h"

namespace tierrt::alloc {

enum class Move : std::uint8_t { Spill, Fetch };

class BlockStates {
 public:
  using Lock = std::unique_lock<RankedMutex>;

  BlockStates() = default;
  BlockStates(const BlockStates&) = delete;
  BlockStates& operator=(const BlockStates&) = delete;
  ~BlockStates();

  Lock lock() noexcept { return Lock(mu_); }

  // ---- Block objects (type-stable: never deleted, so lookups stay safe) ----
  Block* new_block() noexcept;
  // Back to the pool, identity cleared (out of every list).
  void recycle(Block* b) noexcept;
  // Every block with a VA, out of the cache and the resident list (shutdown).
  template <class F>
  void drop_all(F&& destroy);

  // ---- the state machine ----
  void set_state(Block* b, State to, const Lock&) noexcept;
  // Waits out a remap and aborts a spill under way, so that what is left is
  // FREED (also for a block without a VA), RESIDENT, SPILLED or FETCHING.
  // `pinned`: blocks the caller holds pinned while it waits (see PinHolder).
  State settle(Block* b, Lock& l, std::span<Block* const> pinned = {}) noexcept;
  void set_lifetime(Block* b, std::uint8_t lifetime, const Lock&) noexcept;  // stores only a change
  // Waits until no thread changes the block's mapping (Block::remapping),
  // whatever its state (an untouched member being mapped is FREED).
  void wait_remapped(const Block* b, Lock& l, std::span<Block* const> pinned) noexcept;

  // ---- granule groups' fences (block.h, Group) ----
  // A member's spill raises its group's fence (Block::fences).
  void raise_fence(Block* member, const Lock&) noexcept;
  // The spill's window ended (remapped, aborted or given up): the fence goes.
  void drop_fence(Block* member, const Lock&) noexcept;
  // Until no member of g is in its window; `pinned` as for settle().
  void wait_unfenced(const Group* g, Lock& l, std::span<Block* const> pinned) noexcept;
  // A fetch's window, raised and dropped by the mover around it.
  void raise_group_fence(Group* g, const Lock&) noexcept {
    g->fence.fetch_add(1, std::memory_order_seq_cst);
    ++fenced_moves_;
  }
  void drop_group_fence(Group* g, const Lock&) noexcept;

  // ---- the cache of freed blocks ----
  // A cached block of `mapped` bytes (or a bit more) made RESIDENT again.
  Block* reuse(std::size_t mapped, std::size_t size, bool spillable, CUstream s, const Lock&) noexcept;
  // The same among the best fits that `usable` accepts.
  template <class Pred>
  Block* reuse_if(std::size_t mapped, std::size_t size, bool spillable, Pred&& usable, const Lock& l) {
    Block* b = cache_.take_if(mapped, BlockCache::kMaxFits, usable);
    if (b != nullptr) revive(b, size, spillable, l);
    return b;
  }
  // Cached blocks that fit `mapped`, best first (null-padded).
  BlockCache::Fits cached_fits(std::size_t mapped, const Lock&) noexcept {
    return cache_.fits(mapped, BlockCache::kMaxFits);
  }
  // RESIDENT -> FREED, kept for reuse on `s`.
  void cache(Block* b, CUstream s, const Lock&) noexcept;
  // Takes cached blocks without a move pending, least recently used first,
  // until `bytes`.
  template <class F>
  std::uint64_t take_cached(std::uint64_t bytes, F&& take, const Lock&);
  // A block take_cached gave out goes back, still FREED, on its free stream.
  void return_cached(Block* b, const Lock&) noexcept { cache_.insert(b); }
  // A cached block of exactly `mapped` bytes that `usable` accepts, out of
  // the cache and no longer counted as cached: it gives its chunk to a
  // fetch (ChunkDonors) and stays FREED until it is destroyed.
  template <class Pred>
  Block* take_donor(std::size_t mapped, Pred&& usable, const Lock&) {
    Block* b = cache_.take_if(mapped, BlockCache::kMaxFits,
                              [&](Block* c) { return c->mapped == mapped && usable(c); });
    if (b != nullptr) uncount_freed(b);
    return b;
  }
  // A donor whose fetch failed: cached again, counted again.
  void return_donor(Block* b, const Lock&) noexcept;

  // ---- moves ----
  void begin_move(Block* b, Move m, const Lock&) noexcept;
  void fetch_queued(const Lock&) noexcept {
    ++fetches_queued_;
    --fetches_unqueued_;
  }
  // A move finalised or given up (`queued`: it had been handed to the mover).
  void end_move(Block* b, Move m, bool queued) noexcept;
  void wait_moves_done() noexcept;  // every started move finalised
  // Until the block's own moves are finalised (the mover still holds it
  // between setting its final state and letting go); with `l` held.
  void wait_moves_of(const Block* b, Lock& l) noexcept;
  void wait_spills_done() noexcept;

  // ---- claims: device memory on its way to, or away from, a block ----
  // From the moment an allocation asks for device memory until its block is
  // RESIDENT (or it failed), or while a trim releases cached blocks: a
  // rescue on another thread waits for it (the block it brings becomes a
  // candidate, the memory it releases becomes free) rather than giving up.
  // A fetch is a claim from claim_for_fetch until it is queued or undone
  // (begin_move, fetch_queued, end_move count it).
  class Claim {
   public:
    explicit Claim(BlockStates& s) noexcept;
    Claim(BlockStates& s, const Lock&) noexcept;
    ~Claim();  // a change the rescues wait for
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;

   private:
    BlockStates& s_;
  };

  // ---- what the rescue waits for ----
  // A rescue in progress (the pin releases it may wait for notify it).
  class Rescuing {
   public:
    explicit Rescuing(BlockStates& s) noexcept;
    ~Rescuing();
    std::uint64_t seen() const noexcept { return seen_; }

   private:
    BlockStates& s_;
    std::uint64_t seen_;
  };
  // While it lives, the rescue knows that `pinned` are held by a thread that
  // is waiting inside the allocator: waiting for their release is futile.
  // Registering wakes the rescues (they look again), but is no change they
  // wait for: that would have two waiting rescues wake each other forever.
  // `holds_claim`: the waiting thread holds a Claim (or a fetch not yet
  // queued), which cannot end while it waits.
  class PinHolder {
   public:
    PinHolder(std::span<Block* const> pinned, const Lock&, BlockStates& s, bool holds_claim = false) noexcept;
    ~PinHolder();  // under the lock too
    PinHolder(const PinHolder&) = delete;
    PinHolder& operator=(const PinHolder&) = delete;
    bi::list_member_hook<> hook;
    std::span<Block* const> pinned;

   private:
    BlockStates& s_;
    bool holds_claim_;
  };
  // A remap finished: wakes those waiting in settle().
  void remap_done() noexcept { changed_.notify_all(); }
  // Launch pins were released, or a user pin: wakes the rescues waiting.
  void pins_released() noexcept;
  // Waits until something happened since `seen` that may free device memory
  // (true: a move finished, pins were released, a claim ended), or returns
  // false as soon as nothing can: no move under way, no claim but those of
  // threads waiting here, every candidate's launch pins held by threads
  // waiting inside the allocator (`pinned`: the caller's; `holds_claim`:
  // whether the caller holds a claim), and none of `held` (the candidates
  // the caller found held by a launch after `seen` was taken) let go since.
  bool wait_for_change(std::uint64_t seen, Lock& l, std::span<Block* const> pinned, bool holds_claim,
                       std::span<Block* const> held = {}) noexcept;
  // Resident spillable blocks: the rescue's candidates.
  template <class F>
  void for_each_resident(F&& f, const Lock&);
  void note_host_full(const Lock&) noexcept { ++host_full_; }
  // Every block with a VA that is not FREED.
  template <class F>
  void for_each_live(F&& f, const Lock&);

  void fill_stats(Stats* s) noexcept;

 private:
  using ResidentList = bi::list<Block, bi::member_hook<Block, bi::list_member_hook<>, &Block::resident_hook>,
                                bi::constant_time_size<true>>;
  using PoolList = bi::list<Block, bi::member_hook<Block, bi::list_member_hook<>, &Block::pool_hook>>;
  using HolderList = bi::list<PinHolder, bi::member_hook<PinHolder, bi::list_member_hook<>, &PinHolder::hook>>;

  void count(State s, const Block* b, int delta) noexcept;
  void uncount_freed(Block* b) noexcept;
  // A block just taken from the cache: RESIDENT with its new size.
  void revive(Block* b, std::size_t size, bool spillable, const Lock& l) noexcept;
  // SPILLING -> RESIDENT: the copy under way is discarded when it completes.
  void abort_spill(Block* b, const Lock&) noexcept;
  // `held`: as for wait_for_change().
  bool could_change_locked(std::span<Block* const> held) const noexcept;
  // Launch pins on `b` held by threads waiting inside the allocator: pins
  // that will not be released while they wait (the others will).
  std::uint32_t pins_of_waiting_threads_locked(const Block* b) const noexcept;

  // Rank 30 (lock_rank.h): alloc.uses is taken inside it; it is never
  // taken inside another allocator lock.
  mutable RankedMutex mu_{kRankBlocks, "alloc.blocks"};
  std::condition_variable_any changed_;  // a move, a remap or a pin release finished
  BlockStorage storage_;
  PoolList pool_;
  ResidentList resident_;  // RESIDENT and spillable
  BlockCache cache_;
  HolderList holders_;
  std::uint64_t generation_ = 0;  // bumped by every change that may free device memory
  std::atomic<int> rescuing_{0};
  std::size_t moves_ = 0, spills_ = 0, fetches_queued_ = 0;
  // Claims in progress, fetches claimed but not queued, and how many of
  // either belong to threads waiting in wait_for_change.
  std::size_t claims_ = 0, fetches_unqueued_ = 0, waiting_claims_ = 0;
  std::uint64_t state_blocks_[kStateCount] = {}, state_bytes_[kStateCount] = {};
  std::uint64_t lifetime_bytes_[8] = {};
  std::uint64_t aborted_ = 0, rescues_ = 0, host_full_ = 0;
  std::uint64_t fenced_moves_ = 0, fence_waits_ = 0, fence_wait_ns_ = 0;
};

template <class F>
void BlockStates::drop_all(F&& destroy) {
  std::vector<Block*> cached;
  cache_.for_each([&](Block* b) { cached.push_back(b); });
  for (Block* b : cached) cache_.erase(b);
  resident_.clear();
  pool_.clear();
  storage_.for_each([&](Block& b) {
    if (b.va != 0) destroy(&b);
  });
}

template <class F>
std::uint64_t BlockStates::take_cached(std::uint64_t bytes, F&& take, const Lock&) {
  std::vector<Block*> all;
  cache_.for_each([&](Block* b) { all.push_back(b); });
  // Least recently used first: its last user is the likeliest done, and the
  // trim waits for it (larger first among equals: fewer to wait for).
  std::stable_sort(all.begin(), all.end(), [](const Block* x, const Block* y) {
    const std::uint64_t ux = x->last_use.load(std::memory_order_relaxed), uy = y->last_use.load(std::memory_order_relaxed);
    return ux != uy ? ux < uy : x->mapped > y->mapped;
  });
  std::uint64_t sum = 0;
  for (auto it = all.begin(); it != all.end() && sum < bytes; ++it) {
    Block* b = *it;
    if (b->ops_pending != 0) continue;  // an aborted spill's copy still reads it
    cache_.erase(b);
    sum += b->mapped;
    take(b);
  }
  return sum;
}

template <class F>
void BlockStates::for_each_resident(F&& f, const Lock&) {
  for (Block& b : resident_) f(&b);
}

template <class F>
void BlockStates::for_each_live(F&& f, const Lock&) {
  storage_.for_each([&](Block& b) {
    if (b.va != 0 && b.st() != State::Freed) f(&b);
  });
}

}  // namespace tierrt::alloc
