// The mover: spills and fetches. A move is started on the caller's thread
// (the copy enqueued on the D2H or H2D stream, which wait on the block's use
// events) and finalised on the mover's own thread once the copy completed:
// a spill then takes the VA off its device chunk, a fetch makes the block
// RESIDENT. State changes go through BlockStates; what differs between remap
// and copy spilling is the HostBacking's.
//
// Rules kept here:
// - a spill's copy waits on the block's use events, and its device chunk is
//   unmapped only once that copy completed, which implies every earlier use
//   completed; a use after the spill started aborts the spill instead;
// - the VA is never left unmapped while work may be enqueued against it:
//   launches pin blocks (no spill starts on a pinned block) and a remap
//   waits for pins to drop and blocks new ones (Block::remapping);
// - a fetch hands back its event; consumers wait on it with
//   cuStreamWaitEvent, never on the host;
// - a move that fails at any step leaves the block where its bytes are (a
//   spill: resident; a fetch: spilled, in remap mode on its host copy), and
//   memory a copy may still touch, or a VA is still mapped onto, is kept,
//   never released or reused under it;
// - once tiering is stopped (stop_tiering: a failure tierrt could not
//   recover from in its own machinery) no spill starts and a spill under way
//   ends with its block resident; fetches go on, so that spilled blocks come
//   back.
#pragma once

#include <cuda.h>
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <span>

#include "allocator/allocator.h"
#include "block_states.h"
#include "device_arena.h"
#include "host_backing.h"
#include "use_tracker.h"

namespace tierrt::alloc {

// Freed blocks whose device memory a fetch may take in stream order (the
// allocator's cache): the fetch's copy waits on the device for the freed
// block's last uses, where a rescue would make the host wait for them.
class ChunkDonors {
 public:
  // A cached block of exactly `bytes`, with no move, pin or capture on it,
  // leaves the cache and gives its chunk (*chunk; *donor: the block, still
  // mapped onto it): `waiter` waits for every use of it. False when none
  // (or its uses could not be waited for: it stays cached).
  virtual bool donate(std::size_t bytes, CUstream waiter, CUmemGenericAllocationHandle* chunk,
                      Block** donor) noexcept = 0;
  // The fetch failed and its chunk is mapped nowhere else: the donor has it
  // back and returns to the cache.
  virtual void take_back(Block* donor, CUmemGenericAllocationHandle chunk) noexcept = 0;
  // The fetch's copy completed, and with it every use of the donor: its VA
  // and record go (the chunk is the fetched block's).
  virtual void retire(Block* donor) noexcept = 0;

 protected:
  ~ChunkDonors() = default;
};

class Mover {
 public:
  Mover(BlockStates& blocks, DeviceArena& arena, HostBacking& backing, UseTracker& uses) noexcept
      : blocks_(blocks), arena_(arena), backing_(backing), uses_(uses) {}
  Mover(const Mover&) = delete;
  Mover& operator=(const Mover&) = delete;
  ~Mover();

  // The copy streams and the mover's thread.
  CUresult start() noexcept;
  // Finalises every move under way and ends the thread.
  void stop() noexcept;

  // `launch_held`, when given, is set where the spill came back Busy because
  // a launch being enqueued holds the block (pinned or announced).
  SpillResult spill(Block* b, bool* launch_held = nullptr) noexcept;
  // Makes `consumer` (if not null) wait for the block's bytes: a fetch is
  // started when it is spilled. `demand`: a launch needs it now (it may
  // spill others to make room); `pinned`: blocks that launch holds pinned.
  CUresult fetch(Block* b, CUstream consumer, bool demand, std::span<Block* const> pinned = {}) noexcept;

  // While held, no spill or fetch starts (claims answer Busy or
  // STREAM_CAPTURE_UNSUPPORTED); the caller holds alloc.blocks, so a claim
  // either sees the hold or has begun its move before it.
  void hold_locked() noexcept { ++held_; }
  void resume_locked() noexcept { --held_; }

  // Stops tiering for good; true for the call that stopped it. `why` is
  // copied (a line of the log, at most kWhyBytes - 1 bytes of it).
  bool stop_tiering(const char* why) noexcept;
  // Null while tiering runs; else why it stopped.
  const char* tiering_stopped() const noexcept { return stopped_.load(std::memory_order_acquire); }
  // Whether a spill of a live, spillable block was ever asked for (whatever
  // came of it): until then no block's use is one a move waits on.
  bool spill_asked() const noexcept { return spill_asked_.load(std::memory_order_relaxed); }
  const std::atomic<bool>& spill_asked_flag() const noexcept { return spill_asked_; }
  // The next spill the mover thread finalises finds a broken invariant: how
  // tests reach the containment of one (Modes.ContainedBrokenInvariant*).
  void inject_broken_invariant() noexcept { injected_.store(true, std::memory_order_relaxed); }
  static constexpr std::size_t kWhyBytes = 160;

  void set_donors(ChunkDonors* d) noexcept { donors_ = d; }
  void set_observer(MoveObserver* o) noexcept { observer_.store(o, std::memory_order_release); }
  MoveObserver* observer() const noexcept { return observer_.load(std::memory_order_acquire); }
  CUstream fetch_stream() const noexcept { return h2d_; }
  void fill_stats(Stats* s) const noexcept;

 private:
  struct Op;
  // spill
  SpillResult claim_for_spill(Op* op, UseSlot* uses, int* nuses, bool* launch_held) noexcept;
  SpillResult enqueue_spill(Op* op, UseSlot* uses, int nuses) noexcept;
  void undo_spill(Op* op, SpillResult why) noexcept;
  // fetch
  CUresult claim_for_fetch(Block* b, bool demand, std::span<Block* const> pinned, Op** op,
                           UseEvent** ready) noexcept;
  CUresult enqueue_fetch(Op* op, bool demand, std::span<Block* const> pinned) noexcept;
  // The fetch's device chunk: a spare, room in the budget, a freed block's
  // (ChunkDonors), else what a rescue makes room for.
  CUresult obtain_fetch_chunk(Op* op, bool demand, std::span<Block* const> pinned) noexcept;
  // The chunk of a fetch that failed goes back where it came from.
  void give_back_fetch_chunk(Op* op) noexcept;
  void undo_fetch(Op* op) noexcept;
  UseEvent* publish_fetch(Op* op, bool demand) noexcept;
  // Granule groups (block.h, Group): a fetch's fence dropped on failure, and
  // the wait of a move whose fence is up for the launches being enqueued.
  void drop_fetch_fence(Op* op) noexcept;
  static void wait_group_unpinned(const Group& g) noexcept;
  // The event that completes with the copy just enqueued on `s`.
  CUresult record_done(Op* op, CUstream s) noexcept;
  // the mover thread
  void queue(Op* op) noexcept;
  // Waits for the move's copy (its event, else its stream).
  CUresult wait_copy(const Op& op) noexcept;
  // Whether everything enqueued on the mover's stream `s` is known done: a
  // failed wait is asked again, then the stream is polled for a while. A
  // copy whose end is unknown must never have its memory unmapped under it.
  static bool settle(CUstream s) noexcept;
  void run() noexcept;
  void finalize(Op* op) noexcept;
  void finalize_spill(Op* op) noexcept;
  void finalize_fetch(Op* op) noexcept;
  void report(const Op& op) noexcept;
  // What is wrong with a spill about to be finalised (null: nothing); the
  // caller keeps the block resident and stops tiering.
  const char* broken_spill_invariant(const Block& b) noexcept;

  BlockStates& blocks_;
  DeviceArena& arena_;
  HostBacking& backing_;
  UseTracker& uses_;
  ChunkDonors* donors_ = nullptr;  // set before the first fetch
  CUstream d2h_ = nullptr, h2d_ = nullptr;
  std::atomic<MoveObserver*> observer_{nullptr};

  // Rank 40 (lock_rank.h): nothing is taken inside it; the mover thread
  // finalises with it released.
  RankedMutex queue_mu_{kRankMoveQueue, "alloc.move_queue"};
  std::condition_variable_any queued_;
  Op* queue_head_ = nullptr;  // oldest first
  Op* queue_tail_ = nullptr;
  bool stopping_ = false;
  bool bound_ = false;  // the thread tried to make the context current (start() waits for it)
  CUresult bind_result_ = CUDA_SUCCESS;  // how that went (under queue_mu_)
  pthread_t thread_{};
  bool running_ = false;
  int held_ = 0;  // guarded by alloc.blocks
  // Set once (stop_tiering); points into why_, written before it.
  std::atomic<const char*> stopped_{nullptr};
  std::atomic<bool> stopping_tiering_{false};
  std::atomic<bool> injected_{false};
  std::atomic<bool> spill_asked_{false};  // set once, never cleared
  char why_[kWhyBytes] = {};

  // Attempts and completions apart (Stats): a failed move is never counted
  // as done.
  std::atomic<std::uint64_t> spills_{0}, spills_done_{0}, spills_failed_{0};
  std::atomic<std::uint64_t> fetches_started_{0}, demand_fetches_started_{0};
  std::atomic<std::uint64_t> fetches_{0}, demand_fetches_{0}, fetches_failed_{0}, fetches_put_off_{0};
  std::atomic<std::uint64_t> bytes_spilled_{0}, bytes_fetched_{0};
  std::atomic<std::uint64_t> chunks_handed_over_{0};  // fetches given a freed block's chunk
  std::atomic<std::uint64_t> fetch_chunks_created_{0};  // fetches given a new chunk (cuMemCreate)
};

}  // namespace tierrt::alloc
