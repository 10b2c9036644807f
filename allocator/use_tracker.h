// Which work may still use each block: per block, one slot per stream holding
// the event recorded after that stream's last use. A spill's copy waits on
// them, a cached block reused on another stream waits on them, and a remap
// waits for them on the host. Events are pooled and reference-counted: one
// event is shared by every block a launch named. A use whose event could not
// be made or recorded is stored as the unrecorded marker: it is complete
// only once its stream is idle, so the block never looks idle before. Also
// the timing-event pairs that measure the mover's copies.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "allocator/block.h"
#include "lock_rank.h"
#include "allocator/ranked_mutex.h"

namespace tierrt::alloc {

// Whether memory allocated or freed on `s` is stream-ordered (the
// application's own stream: cuMemAllocAsync, cuMemFreeAsync). The legacy
// stream (cuMemAlloc, cuMemFree) orders nothing against non-blocking streams:
// memory handed out there must be free of every recorded use already.
inline bool stream_ordered(CUstream s) noexcept { return s != nullptr && s != CU_STREAM_LEGACY; }

// Two timing-enabled events around one copy; both null when none could be
// made or recorded (measuring is optional).
struct CopyTimer {
  CUevent begin = nullptr, end = nullptr;
};

class UseTracker {
 public:
  UseTracker() = default;
  UseTracker(const UseTracker&) = delete;
  UseTracker& operator=(const UseTracker&) = delete;
  ~UseTracker();  // every event must have been given back

  // An event with one reference, or null when none can be made.
  UseEvent* acquire() noexcept;
  static void ref(UseEvent* e) noexcept {
    if (!unrecorded(e)) e->refs.fetch_add(1, std::memory_order_relaxed);
  }
  void unref(UseEvent* e) noexcept;
  // The marker of a use no event stands for (never pooled, never counted).
  static bool unrecorded(const UseEvent* e) noexcept { return e == &unrecorded_; }

  // Records that work just enqueued on `s` uses the blocks. The caller
  // keeps them pinned meanwhile, so that no spill starts. When no event can
  // be recorded the blocks keep an unrecorded use on `s` and the error is
  // returned.
  CUresult record(std::span<Block* const> blocks, CUstream s) noexcept;
  // The block's uses on streams other than `except` (all when null), each
  // with a reference for the caller; returns how many.
  int take_refs(Block* b, UseSlot* out, CUstream except = nullptr) noexcept;
  // The same for a block the caller has just taken from the cache: nothing
  // may use a freed block, so nobody else touches its slots (no lock).
  static int take_refs_owned(const Block* b, UseSlot* out, CUstream except) noexcept {
    int n = 0;
    for (int i = 0; i < b->nuses; ++i)
      if (except == nullptr || b->uses[i].stream != except) {
        ref(b->uses[i].ev);
        out[n++] = b->uses[i];
      }
    return n;
  }
  // Makes `s` wait for each event and drops the references. A use with no
  // event, or whose event `s` could not wait on, is waited for on the host;
  // the first failure of that wait is returned (nothing is waited for after it).
  CUresult wait_then_unref(CUstream s, std::span<const UseSlot> uses) noexcept;
  // Waits on the host until the use completed: its event (asked twice); its
  // stream when there is none or the event's waits failed, unless the stream
  // captures (that would end the capture); the context when that failed.
  static CUresult wait_host(const UseSlot& u) noexcept;
  // Whether the use is known complete now (a failed query says no).
  static bool completed(const UseSlot& u) noexcept;
  // The host waits for every use recorded on the block, which keeps them
  // (the first failure is returned; a use on a capturing stream cannot be
  // waited for until its capture ends: STREAM_CAPTURE_UNSUPPORTED).
  CUresult wait_all(Block* b) noexcept;
  // Forgets the block's uses; with `synchronize`, the host waits for each
  // first (the first failure is returned: nothing is known complete then).
  CUresult forget(Block* b, bool synchronize) noexcept;
  // How many uses are recorded on the block now (alloc.uses is taken, and
  // may be inside alloc.blocks).
  int recorded(const Block* b) noexcept;
  // Drops the block's uses known complete (queried without the lock); true
  // when none is left.
  bool retire_completed(Block* b) noexcept;
  bool idle(const Block* b) noexcept;  // no use left
  // A fetch's copy on `s` becomes a use of the block: the caller's reference
  // to `e` passes to the block. False when its slots are full (the caller
  // then waits for `e` on the host).
  bool try_adopt(Block* b, CUstream s, UseEvent* e) noexcept;
  // Stamps the block as used now: its place in the rescue's coldest-first
  // order (as recent as the last recorded use).
  void touch(Block* b) noexcept {
    b->last_use.store(clock_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }

  // Records the begin event of a copy about to be enqueued on `s`.
  CopyTimer start_timer(CUstream s) noexcept;
  // Records the end event after the copy (clears the timer on failure).
  void stop_timer(CopyTimer* t, CUstream s) noexcept;
  // The copy's device time once it completed; 0 when unknown.
  static std::uint64_t elapsed_ns(const CopyTimer& t) noexcept;
  void release(CopyTimer* t) noexcept;
  // A timing event recorded on `s` now (null when none could be): where a
  // stream got to, for device_ns_between.
  CUevent mark(CUstream s) noexcept;
  void release_mark(CUevent e) noexcept;
  // Device time from `from` to `to` once both completed (negative when `to`
  // came first); false while either has not.
  static bool device_ns_between(CUevent from, CUevent to, double* ns) noexcept;

 private:
  CUevent take_timing_event() noexcept;  // from the pool, else a new one; null when none
  static constexpr int kMaxChain = 16;
  // Events a stream waits on before its use is recorded: the oldest slot of
  // blocks whose slots are full (the new event then implies them).
  struct Chain {
    UseEvent* ev[kMaxChain];
    int n = 0;
    bool has(const UseEvent* e) const noexcept;
  };
  UseEvent* pop_free_locked() noexcept;
  void unref_locked(UseEvent* e) noexcept;
  void collect_chain_locked(std::span<Block* const> blocks, CUstream s, Chain* c) noexcept;
  // Stores `e` as each block's use on `s`, from `first` on; stops where a
  // slot whose event is not in the chain would have to be dropped, handing
  // that event to `late` (the host waits for it). Returns where it stopped.
  std::size_t store_locked(std::span<Block* const> blocks, std::size_t first, CUstream s, UseEvent* e,
                           const Chain& c, UseSlot* late) noexcept;
  // Stores the unrecorded marker as each block's use on `s`.
  CUresult mark_unrecorded(std::span<Block* const> blocks, CUstream s) noexcept;

  static UseEvent unrecorded_;

  // Rank 50 (lock_rank.h): taken inside alloc.blocks; nothing inside it.
  RankedMutex mu_{kRankUses, "alloc.uses"};
  UseEvent* free_ = nullptr;         // pooled events (refs 0)
  std::deque<UseEvent> storage_;     // type-stable: events are never deleted
  std::vector<CUevent> timing_free_;
  std::atomic<std::uint64_t> clock_{0};
};

}  // namespace tierrt::alloc
