// Which work may still use each block: per block, one slot per stream holding
// the event recorded after that stream's last use, and its lazy use (below).
// A spill's copy waits on them, a cached block reused on another stream
// waits on them, and a remap waits for them on the host. Events are pooled
// and reference-counted: one
// event is shared by every block a launch named. A use whose event could not
// be made or recorded is stored as the unrecorded marker: it is complete
// only once its stream is idle, so the block never looks idle before. Also
// the timing-event pairs that measure the mover's copies.
//
// Lazy use events. Recording an event after every launch is most of what the
// launch hook costs, and nearly always nobody waits on it. A lazy use shares
// its stream's open event (UsePhase::Open), which is recorded on the stream
// by the first launch there once the window passed since the last record
// (Options::lazy_use_window_ns),
// or by whoever needs it first (settle): an event recorded later on the same
// stream completes after the use all the same, so a wait is at most longer,
// never shorter. Every slot handed out of the tracker is settled (take_refs,
// forget, the chain), so nothing waits on or queries an open event. A
// settle on the legacy stream records on a blocking stream of ours instead
// (it runs after the legacy stream's earlier work, and touching the legacy
// stream itself while a blocking stream captures would break that capture);
// on a named stream it records there unless the stream captures, under the
// stream's lock, which a capture's begin and a stream joining a capture take
// first (flush): a capture never holds an event of ours. Per-thread default
// streams are never lazy (no other thread can name them).
//
// A block's lazy use is not one of its slots but its own field
// (Block::lazy), so that a launch records it without a lock: it reads its
// stream's open event once the launch is enqueued (OpenStream::open_now,
// which a record clears before it records, so the record comes after the
// launch), and points each block's lazy use at it with a compare and swap,
// unless it does already (what a training job's weights do, launch after
// launch: nothing is stored then). The event a block gives up is an older
// open event of the same stream, which the new one's record follows: its
// reference goes, one subtraction per run of equal events; anything else
// given up (another stream's lazy use, or a newer one a racing launch
// stored) moves into the block's slots (where all 8 are taken, the
// launch's stream waits for it on the device and a use event recorded
// there after stands for both). The locked way (the stream's lock)
// is left for opening an event, recording one whose window passed, and a
// stream not yet in the table.
//
// Where a background thread records aged events (the policy thread calls
// record_aged() at each turn, every 50 us at most while launches come), a
// launch records one itself only once kLauncherWindows windows passed: the
// event record, the largest cost left on the launch path, moves off it,
// and a wait on a lazy use still includes at most a few windows of later
// work. Only on named streams: a settle of the legacy stream's event from
// another thread records on a blocking stream of ours instead. There a
// launch reads the window's clock at every kClockEvery-th launch of its
// stream only (rdtsc: 11 ns, a tenth of the launch path on the machine it
// was measured on).
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
#include "tick_clock.h"

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
  // Takes `n` references to `e` (the unrecorded marker is never counted).
  static void ref(UseEvent* e, int n = 1) noexcept {
    if (n != 0 && !unrecorded(e)) e->refs.fetch_add(n, std::memory_order_relaxed);
  }
  void unref(UseEvent* e, int n = 1) noexcept;
  // The marker of a use no event stands for (never pooled, never counted).
  static bool unrecorded(const UseEvent* e) noexcept { return e == &unrecorded_; }
  // A use on `s` no event stands for: waited for through its stream.
  static UseSlot unrecorded_use(CUstream s) noexcept { return UseSlot{s, &unrecorded_, 0}; }

  // Records that work just enqueued on `s` uses the blocks. The caller
  // keeps them pinned meanwhile, so that no spill starts. When no event can
  // be recorded the blocks keep an unrecorded use on `s` and the error is
  // returned. `lazy`: the uses share the stream's open event (see above);
  // the caller passes it only for a stream any thread of this context may
  // name (a named stream, or the legacy stream of the allocator's context).
  CUresult record(std::span<Block* const> blocks, CUstream s, bool lazy = false) noexcept;
  // Records `s`'s open event now, on `s`: before a capture begins on it or
  // it joins one, and before it is destroyed (`forget`: its slot in the
  // table is freed too).
  void flush(CUstream s, bool forget = false) noexcept;
  // Creates the blocking stream a settle on the legacy stream records on
  // (in the current context, the allocator's); `window_ns`: how long an
  // open event may gather lazy uses before a launch records it.
  CUresult start(std::uint64_t window_ns) noexcept;
  // A background thread will call record_aged() at each of its turns (or,
  // false, no longer will): launches on named streams leave their open
  // event's record to it until kLauncherWindows windows passed.
  void set_background_records(bool on) noexcept { background_.store(on, std::memory_order_relaxed); }
  // Records each named stream's open event whose window passed (a stream
  // whose lock a launch holds is left to that launch). Any thread with the
  // allocator's context current, holding no lock of the allocator's.
  void record_aged() noexcept;
  // Open events record_aged() recorded.
  std::uint64_t background_records() const noexcept { return background_records_.load(std::memory_order_relaxed); }
  // Use events recorded so far, uses that shared an open event, and those of
  // them that took no lock (their blocks held the open event already).
  void counts(std::uint64_t* events, std::uint64_t* lazy, std::uint64_t* unlocked) noexcept;
  // The block's uses on streams other than `except` (all when null), each
  // with a reference for the caller and settled; returns how many.
  int take_refs(Block* b, UseSlot* out, CUstream except = nullptr) noexcept;
  // The same for a block the caller has just taken from the cache: nothing
  // may use a freed block, so nobody else touches its slots (no lock).
  int take_refs_owned(const Block* b, UseSlot* out, CUstream except) noexcept {
    const int n = copy_refs(b, out, except);
    for (int i = 0; i < n; ++i) settle(&out[i]);
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
  // Waits on the host until `s` is idle by querying it (no context
  // synchronize); the first error other than NOT_READY is returned, and
  // STREAM_CAPTURE_UNSUPPORTED once `s` captures.
  static CUresult poll_stream(CUstream s) noexcept;
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

#ifndef NDEBUG
  // Debug builds: called by a launch between reading a block's lazy use
  // and swapping it (repoint), so that a test can run another launch there
  // and show the swap keeps what that launch stored.
  static inline std::atomic<void (*)(Block*)> between_read_and_swap{nullptr};
#endif

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
  // The block's uses on streams other than `except`, each with a reference
  // (the caller holds mu_, or owns the block), not yet settled.
  // The lazy use comes last, marked kLazyUse.
  static int copy_refs(const Block* b, UseSlot* out, CUstream except) noexcept {
    int n = 0;
    for (int i = 0; i < b->nuses; ++i)
      if (except == nullptr || b->uses[i].stream != except) {
        ref(b->uses[i].ev);
        out[n++] = b->uses[i];
      }
    // Under mu_ a lazy use just given up is not pooled before this reference
    // is counted (push_free_locked looks again); an owned block has no launch.
    if (UseEvent* x = b->lazy.load(std::memory_order_acquire); x != nullptr && (except == nullptr || x->on != except)) {
      ref(x);
      out[n++] = UseSlot{x->on, x, kLazyUse};
    }
    return n;
  }
  // The `at` of a lazy use handed out (no slot's: the use clock starts at 1).
  static constexpr std::uint64_t kLazyUse = UINT64_MAX;
  static constexpr int kOpenStreams = 64;
  // A stream whose launches record lazily: its open event.
  struct OpenStream {
    std::atomic<CUstream> key{nullptr};  // written under mu (and open_table_mu_ to claim)
    RankedMutex mu{kRankStreamUses, "alloc.stream_uses"};
    UseEvent* open = nullptr;        // holds one reference; null: none open
    // `open` for readers without mu, cleared before it is recorded: a launch
    // enqueued before it reads null is one the record comes after.
    std::atomic<UseEvent*> open_now{nullptr};
    // Lazy uses that took no lock: a statistic, counted with a load and a
    // store rather than a locked add (15 ns a launch), so exact while one
    // thread at a time launches on the stream; threads launching on one
    // stream at once may lose counts.
    std::atomic<std::uint64_t> unlocked_uses{0};
    // When its open event was last recorded, in window_clock_'s ticks
    // (written under mu, read by the unlocked path too).
    std::atomic<std::uint64_t> recorded_at{0};
    std::uint64_t lazy_uses = 0, records = 0;  // under mu; kept when the slot passes to another stream
    // Which claim of the slot this is (never 0) and how many events it
    // opened: the stamp of its open events (UseEvent::stamp; under mu).
    std::uint32_t serial = 0, opened = 0;
  };
  static std::size_t home_of(CUstream s) noexcept;
  OpenStream* open_stream(CUstream s) noexcept;  // null when it has none
  OpenStream* claim_open_stream(CUstream s) noexcept;  // null when the table is full
  // Records `st`'s open event: on its stream from a launch on it
  // (`launcher`), else as settle says; then none is open.
  void record_open_locked(OpenStream& st, bool launcher) noexcept;
  // An open event is recorded (a failed one becomes the unrecorded marker).
  void settle(UseSlot* u) noexcept;
  bool settle_event(UseEvent* e) noexcept;  // true once it is recorded
  // The locked way, where record_lazily_unlocked found something to store
  // (or the window passed) at `now`.
  CUresult record_lazily(std::span<Block* const> blocks, CUstream s, std::uint64_t now) noexcept;
  // The window a launch on `s` records its stream's open event after.
  std::uint64_t launcher_window(CUstream s) const noexcept {
    return background_.load(std::memory_order_relaxed) && s != CU_STREAM_LEGACY ? background_window_ : window_;
  }
  // The launch path's lazy use, without a lock (see above); false where the
  // locked way must do it (no event open, its window passed, the stream not
  // in the table), nothing changed then.
  // Inline into record(), the launch path's one call here (defined there).
  [[gnu::always_inline]] inline bool record_lazily_unlocked(std::span<Block* const> blocks, CUstream s) noexcept;
  // With background records, how many launches of a stream share one read
  // of the window's clock (a power of two).
  static constexpr std::uint64_t kClockEvery = 4;
  // Records a use event on `s` now, stored in each block's slot for `s`.
  // `after`: a recorded event `s` waits on first, which the new event then
  // implies (the caller keeps its reference).
  CUresult record_now(std::span<Block* const> blocks, CUstream s, UseEvent* after = nullptr) noexcept;
  // Points each block's lazy use at `e`, an open event (or one just
  // recorded) its stream's launch came before, for which the caller counted
  // `held` references (the unused are given back).
  void repoint(std::span<Block* const> blocks, UseEvent* e, int held) noexcept;
  // A lazy use given up that `e`'s record does not follow: into the block's
  // slots (our reference passes to its slot); where all 8 are taken, the
  // launch's stream `s` waits for it and records a use after (record_now).
  void absorb(Block* b, UseEvent* x, CUstream s) noexcept;

  static constexpr int kMaxChain = 16;
  // Events a stream waits on before its use is recorded: the oldest slot of
  // blocks whose slots are full (the new event then implies them).
  struct Chain {
    UseEvent* ev[kMaxChain];
    int n = 0;
    bool has(const UseEvent* e) const noexcept;
  };
  UseEvent* pop_free_locked() noexcept;
  void push_free_locked(UseEvent* e) noexcept;  // unless referenced again or pooled
  // Drops `n` references to `e` (none: null or n 0), under mu_.
  void unref_locked(UseEvent* e, int n = 1) noexcept;
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
  RankedMutex open_table_mu_{kRankOpenTable, "alloc.open_table"};
  std::uint32_t claims_ = 0;  // under open_table_mu_
  OpenStream open_[kOpenStreams];
  CUstream legacy_proxy_ = nullptr;  // blocking: runs after the legacy stream's earlier work
  // How long an open event may gather lazy uses before a launch records it:
  // bounds how much later work a wait on a lazy use includes when nobody
  // settled it earlier.
  TickClock window_clock_;  // steady_clock until start() calibrates it
  std::uint64_t window_ = 20'000;  // in window_clock_'s ticks
  static constexpr std::uint64_t kLauncherWindows = 4;
  std::uint64_t background_window_ = 80'000;  // kLauncherWindows windows, saturated
  std::atomic<bool> background_{false};  // a thread calls record_aged()
  std::atomic<std::uint64_t> background_records_{0};
  std::uint64_t eager_records_ = 0;  // under mu_
  std::atomic<std::uint64_t> clock_{0};
};

}  // namespace tierrt::alloc
