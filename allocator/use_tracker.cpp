#include "use_tracker.h"

#include <cassert>
#include <chrono>
#include <thread>

#include "allocator/capture_gate.h"
#include "driver/driver.h"

namespace tierrt::alloc {

UseEvent UseTracker::unrecorded_;

UseTracker::~UseTracker() {
  for (UseEvent& e : storage_)
    if (e.ev != nullptr) (void)TIERRT_CU(cuEventDestroy, e.ev);
  for (CUevent e : timing_free_) (void)TIERRT_CU(cuEventDestroy, e);
  if (legacy_proxy_ != nullptr) (void)TIERRT_CU(cuStreamDestroy, legacy_proxy_);
}

CUresult UseTracker::start(std::uint64_t window_ns) noexcept {
  window_clock_.calibrate();
  window_ = window_clock_.ticks_in(window_ns);
  background_window_ = window_ > UINT64_MAX / kLauncherWindows ? UINT64_MAX : window_ * kLauncherWindows;
  return TIERRT_CU(cuStreamCreate, &legacy_proxy_, 0u);
}

void UseTracker::counts(std::uint64_t* events, std::uint64_t* lazy, std::uint64_t* unlocked) noexcept {
  {
    std::lock_guard<RankedMutex> g(mu_);
    *events = eager_records_;
  }
  *lazy = *unlocked = 0;
  for (OpenStream& st : open_) {
    std::lock_guard<RankedMutex> g(st.mu);
    *events += st.records;
    const std::uint64_t u = st.unlocked_uses.load(std::memory_order_relaxed);
    *lazy += st.lazy_uses + u;
    *unlocked += u;
  }
}

UseEvent* UseTracker::pop_free_locked() noexcept {
  UseEvent* e = free_;
  if (e != nullptr) {
    free_ = e->next_free;
    e->pooled = false;
    // An add: a launch may hold a reference it is about to give back (block.h).
    e->refs.fetch_add(1, std::memory_order_relaxed);
    e->phase.store(UsePhase::Recorded, std::memory_order_relaxed);
    e->stamp.store(0, std::memory_order_relaxed);
    e->on = nullptr;
  }
  return e;
}

void UseTracker::push_free_locked(UseEvent* e) noexcept {
  // Taken again since its count reached 0 (a launch's brief reference, a
  // reader that found it in a lazy use just given up), or pooled already by
  // whoever dropped that reference: its last holder pools it.
  if (e->refs.load(std::memory_order_acquire) != 0 || e->pooled) return;
  e->pooled = true;
  e->next_free = free_;
  free_ = e;
}

UseEvent* UseTracker::acquire() noexcept {
  {
    std::lock_guard<RankedMutex> g(mu_);
    if (UseEvent* e = pop_free_locked()) return e;
  }
  CUevent ev = nullptr;
  if (TIERRT_CU(cuEventCreate, &ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
  std::lock_guard<RankedMutex> g(mu_);
  UseEvent& e = storage_.emplace_back();
  e.ev = ev;
  e.refs.store(1, std::memory_order_relaxed);
  return &e;
}

void UseTracker::unref_locked(UseEvent* e, int n) noexcept {
  if (e == nullptr || n == 0 || unrecorded(e)) return;
  if (e->refs.fetch_sub(n, std::memory_order_acq_rel) == n) push_free_locked(e);
}

void UseTracker::unref(UseEvent* e, int n) noexcept {
  if (e == nullptr || n == 0 || unrecorded(e) || e->refs.fetch_sub(n, std::memory_order_acq_rel) != n) return;
  std::lock_guard<RankedMutex> g(mu_);
  push_free_locked(e);
}

bool UseTracker::Chain::has(const UseEvent* e) const noexcept {
  for (int i = 0; i < n; ++i)
    if (ev[i] == e) return true;
  return false;
}

namespace {

int slot_of(const Block* b, CUstream s) noexcept {
  for (int i = 0; i < b->nuses; ++i)
    if (b->uses[i].stream == s) return i;
  return -1;
}

}  // namespace

void UseTracker::collect_chain_locked(std::span<Block* const> blocks, CUstream s, Chain* c) noexcept {
  for (Block* b : blocks) {
    if (b->nuses < kMaxUseSlots || slot_of(b, s) >= 0) continue;
    UseEvent* oldest = b->uses[0].ev;
    if (c->n < kMaxChain && !c->has(oldest)) {
      ref(oldest);
      c->ev[c->n++] = oldest;
    }
  }
}

std::size_t UseTracker::store_locked(std::span<Block* const> blocks, std::size_t first, CUstream s, UseEvent* e,
                                     const Chain& c, UseSlot* late) noexcept {
  const std::uint64_t now = clock_.fetch_add(1, std::memory_order_relaxed) + 1;
  // References counted once per event rather than once per block (a launch
  // naming 8 blocks last named together drops 8 references to one event):
  // one atomic add for `e`, one subtraction per run of equal events given
  // up. Safe under mu_: no other thread sees these slots before it is
  // released, and the caller holds a reference to `e` throughout.
  assert(e->phase.load(std::memory_order_relaxed) != UsePhase::Open);  // lazy uses are Block::lazy
  int taken = 0;
  UseEvent* dropping = nullptr;
  int dropped = 0;
  auto drop = [&](UseEvent* old) {
    if (old != dropping) {
      unref_locked(dropping, dropped);
      dropping = old;
      dropped = 0;
    }
    ++dropped;
  };
  auto settle_counts = [&] {
    unref_locked(dropping, dropped);
    ref(e, taken);
  };
  for (std::size_t i = first; i < blocks.size(); ++i) {
    Block* b = blocks[i];
    assert(b->nuses >= 0 && b->nuses <= kMaxUseSlots);
    const int slot = slot_of(b, s);
    if (slot >= 0) {
      drop(b->uses[slot].ev);
      b->uses[slot] = UseSlot{s, e, now};
    } else if (b->nuses < kMaxUseSlots) {
      b->uses[b->nuses++] = UseSlot{s, e, now};
    } else if (c.has(b->uses[0].ev)) {
      drop(b->uses[0].ev);  // `s` waited on it: `e` implies it
      b->uses[0] = UseSlot{s, e, now};
    } else {
      if (late->ev != nullptr) {  // one at a time: the caller waits for it
        settle_counts();
        return i;
      }
      *late = b->uses[0];  // the block's reference passes to the caller
      b->uses[0] = UseSlot{s, e, now};
    }
    ++taken;
    b->last_use.store(now, std::memory_order_relaxed);
  }
  settle_counts();
  return blocks.size();
}

bool UseTracker::record_lazily_unlocked(std::span<Block* const> blocks, CUstream s) noexcept {
  OpenStream* st = open_stream(s);
  if (st == nullptr) return false;
  // The window passed: the locked way records the event. Where a background
  // thread records aged events, a launch here records one only once several
  // windows passed, and the clock (a tenth of what this path costs) is read
  // at every kClockEvery-th launch of the stream only: the bound moves by at
  // most as many launches.
  const bool background = s != CU_STREAM_LEGACY && background_.load(std::memory_order_relaxed);
  if ((!background || (st->unlocked_uses.load(std::memory_order_relaxed) & (kClockEvery - 1)) == 0) &&
      window_clock_.now() - st->recorded_at.load(std::memory_order_relaxed) >= launcher_window(s))
    return false;
  // Read after the launch was enqueued: while the event is still open, its
  // record comes after the launch (record_open_locked clears open_now first).
  UseEvent* e = st->open_now.load(std::memory_order_seq_cst);
  if (e == nullptr || st->key.load(std::memory_order_acquire) != s) return false;
  // The rescue's coldest-first order: as recent as the last eager record or
  // open event. Stored only where it differs (the clock moves only then), so
  // that launches on other threads naming the same weights do not bounce
  // their lines.
  const std::uint64_t last = clock_.load(std::memory_order_relaxed);
  const std::size_t n = blocks.size();
  std::size_t first = n;  // the first block whose lazy use is not `e`
  for (std::size_t i = 0; i < n; ++i) {
    Block* b = blocks[i];
    if (b->last_use.load(std::memory_order_relaxed) != last) b->last_use.store(last, std::memory_order_relaxed);
    if (first == n && b->lazy.load(std::memory_order_acquire) != e) first = i;
  }
  if (first < n) {
    // The references of the lazy uses about to hold `e` are counted before
    // any does (a reader may take one and drop it meanwhile). `e` may have
    // been recorded and pooled since it was read (even opened again, for a
    // stream that claimed the slot since): once counted, it is still this
    // stream's open event, or the launch takes the locked way.
    const int held = static_cast<int>(n - first);
    ref(e, held);
    if (st->open_now.load(std::memory_order_seq_cst) != e || st->key.load(std::memory_order_acquire) != s) {
      unref(e, held);
      return false;
    }
    repoint(blocks.subspan(first), e, held);
  }
  st->unlocked_uses.store(st->unlocked_uses.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return true;
}

void UseTracker::repoint(std::span<Block* const> blocks, UseEvent* e, int held) noexcept {
  const std::uint64_t stamp = e->stamp.load(std::memory_order_relaxed);
  int used = 0;
  // Events given up, one subtraction per run of equal ones (the blocks a
  // launch names were mostly named together last time).
  UseEvent* dropping = nullptr;
  int dropped = 0;
  for (Block* b : blocks) {
    UseEvent* was = b->lazy.load(std::memory_order_acquire);
#ifndef NDEBUG
    if (void (*seam)(Block*) = between_read_and_swap.load(std::memory_order_relaxed)) seam(b);
#endif
    do {
      if (was == e) break;
    } while (!b->lazy.compare_exchange_weak(was, e, std::memory_order_acq_rel, std::memory_order_acquire));
    if (was == e) continue;
    ++used;
    if (was == nullptr) continue;
    // The lazy use's reference to `was` is ours now: it cannot be pooled and
    // stamped afresh while it is looked at.
    if (!opened_before(was->stamp.load(std::memory_order_relaxed), stamp)) {
      absorb(b, was, e->on);  // another stream's use, or a newer one of this stream (a racing launch)
      continue;
    }
    // An older open event of this stream: `e` is recorded after it.
    if (was != dropping) {
      unref(dropping, dropped);
      dropping = was;
      dropped = 0;
    }
    ++dropped;
  }
  unref(dropping, dropped);
  assert(used <= held);
  unref(e, held - used);
}

void UseTracker::absorb(Block* b, UseEvent* x, CUstream s) noexcept {
  {
    std::lock_guard<RankedMutex> g(mu_);
    if (b->nuses < kMaxUseSlots) {
      // A second slot of one stream may result: each is a use, both waited for.
      b->uses[b->nuses++] = UseSlot{x->on, x, clock_.fetch_add(1, std::memory_order_relaxed) + 1};
      return;
    }
  }
  // Every slot taken (9 streams or more): the launch's stream waits for it
  // on the device and an event recorded there after stands for both (the
  // chain, as where an eager record meets full slots). The host waits only
  // where that cannot be done: the use has no event, or a call failed.
  UseSlot u{x->on, x, 0};
  settle(&u);
  Block* const one[1] = {b};
  if (unrecorded(u.ev) || record_now(one, s, u.ev) != CUDA_SUCCESS) (void)wait_host(u);
  unref(u.ev);
}

CUresult UseTracker::record(std::span<Block* const> blocks, CUstream s, bool lazy) noexcept {
  if (!lazy || drv::is_per_thread_stream_key(s)) return record_now(blocks, s);
  // Null is the legacy stream, and an open-stream slot's "none".
  if (s == nullptr) s = CU_STREAM_LEGACY;
  // The launch path's common case, inline here (no call): nothing to store.
  if (record_lazily_unlocked(blocks, s)) return CUDA_SUCCESS;
  // Read at every lazy use that gets here, and at every one where no
  // background thread records: checked at every 8th only, the XLA-like
  // probe's untiered peak doubled (granule-groups), likely a freed step
  // buffer's use recorded too late for the next step's allocation to reuse
  // its memory.
  return record_lazily(blocks, s, window_clock_.now());
}

CUresult UseTracker::record_now(std::span<Block* const> blocks, CUstream s, UseEvent* after) noexcept {
  Chain chain;
  UseEvent* e = nullptr;
  if (after != nullptr) {
    ref(after);
    chain.ev[chain.n++] = after;
  }
  {
    std::lock_guard<RankedMutex> g(mu_);
    e = pop_free_locked();
    collect_chain_locked(blocks, s, &chain);
    ++eager_records_;
  }
  if (e == nullptr) e = acquire();
  CUresult r = e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  // A chained event that cannot be recorded cannot be waited on: this use
  // becomes unrecorded too (it may not look complete before that one).
  for (int i = 0; i < chain.n && r == CUDA_SUCCESS; ++i)
    r = settle_event(chain.ev[i]) ? TIERRT_CU(cuStreamWaitEvent, s, chain.ev[i]->ev, 0u) : CUDA_ERROR_NOT_READY;
  if (r == CUDA_SUCCESS) r = TIERRT_CU(cuEventRecord, e->ev, s);
  // Another recorder may have filled a block's slots since the chain was
  // collected: the host waits for the slot it displaces, one at a time.
  CUresult waited = CUDA_SUCCESS;
  for (std::size_t next = 0; r == CUDA_SUCCESS && next < blocks.size();) {
    UseSlot late;
    {
      std::lock_guard<RankedMutex> g(mu_);
      next = store_locked(blocks, next, s, e, chain, &late);
    }
    if (late.ev != nullptr) {
      const CUresult w = wait_host(late);
      if (waited == CUDA_SUCCESS) waited = w;
      unref(late.ev);
    }
  }
  for (int i = 0; i < chain.n; ++i) unref(chain.ev[i]);
  unref(e);
  if (r != CUDA_SUCCESS) {
    const CUresult m = mark_unrecorded(blocks, s);
    return m != CUDA_SUCCESS ? m : r;
  }
  return waited;
}

CUresult UseTracker::record_lazily(std::span<Block* const> blocks, CUstream s, std::uint64_t now) noexcept {
  OpenStream* st = open_stream(s);
  if (st == nullptr && (st = claim_open_stream(s)) == nullptr) return record_now(blocks, s);
  UseEvent* e = nullptr;
  const int held = static_cast<int>(blocks.size());
  {
    std::unique_lock<RankedMutex> g(st->mu);
    if (st->key.load(std::memory_order_relaxed) != s) {  // destroyed and claimed again meanwhile
      g.unlock();
      return record_now(blocks, s);
    }
    if (st->open == nullptr) {
      UseEvent* o = acquire();
      if (o == nullptr) {
        g.unlock();
        return record_now(blocks, s);
      }
      o->on = s;
      o->stamp.store(std::uint64_t{st->serial} << 32 | ++st->opened, std::memory_order_relaxed);
      // The rescue's coldest-first order moves on once per open event: the
      // blocks a launch names take the clock as it is (record_lazily_unlocked).
      clock_.fetch_add(1, std::memory_order_relaxed);
      o->phase.store(UsePhase::Open, std::memory_order_release);
      st->open = o;
      st->open_now.store(o, std::memory_order_release);
    }
    // Open now, under the stream's lock: its record comes after the launch,
    // even where it is the one just below. The references of the lazy uses
    // that will hold it are counted first (repoint gives back the unused).
    e = st->open;
    ref(e, held);
    const std::uint64_t last = clock_.load(std::memory_order_relaxed);
    for (Block* b : blocks) b->last_use.store(last, std::memory_order_relaxed);
    ++st->lazy_uses;
    if (now - st->recorded_at.load(std::memory_order_relaxed) >= launcher_window(s))
      record_open_locked(*st, /*launcher=*/true);
  }
  repoint(blocks, e, held);
  return CUDA_SUCCESS;
}

void UseTracker::record_aged() noexcept {
  const std::uint64_t now = window_clock_.now();
  for (OpenStream& st : open_) {
    const CUstream s = st.key.load(std::memory_order_acquire);
    if (!drv::names_a_stream(s) || st.open_now.load(std::memory_order_relaxed) == nullptr ||
        now - st.recorded_at.load(std::memory_order_relaxed) < window_)
      continue;
    std::unique_lock<RankedMutex> g(st.mu, std::try_to_lock);
    if (!g.owns_lock() || st.key.load(std::memory_order_relaxed) != s || st.open == nullptr) continue;
    record_open_locked(st, /*launcher=*/false);
    background_records_.fetch_add(1, std::memory_order_relaxed);
  }
}

// Where a stream's search of the table starts (handles are aligned pointers).
std::size_t UseTracker::home_of(CUstream s) noexcept {
  return (reinterpret_cast<std::uintptr_t>(s) >> 4) % kOpenStreams;
}

UseTracker::OpenStream* UseTracker::open_stream(CUstream s) noexcept {
  const std::size_t first = home_of(s);
  for (std::size_t k = 0; k < kOpenStreams; ++k) {
    OpenStream& st = open_[(first + k) % kOpenStreams];
    if (st.key.load(std::memory_order_acquire) == s) return &st;
  }
  return nullptr;
}

UseTracker::OpenStream* UseTracker::claim_open_stream(CUstream s) noexcept {
  std::lock_guard<RankedMutex> g(open_table_mu_);
  if (OpenStream* st = open_stream(s)) return st;
  const std::size_t first = home_of(s);
  for (std::size_t k = 0; k < kOpenStreams; ++k) {
    OpenStream& st = open_[(first + k) % kOpenStreams];
    if (st.key.load(std::memory_order_acquire) != nullptr) continue;
    std::lock_guard<RankedMutex> l(st.mu);
    if (st.key.load(std::memory_order_relaxed) != nullptr) continue;  // its flush is under way
    assert(st.open == nullptr);
    if (++claims_ == 0) ++claims_;  // 0 stamps no open event
    st.serial = claims_;
    st.opened = 0;
    st.recorded_at.store(0, std::memory_order_relaxed);
    st.key.store(s, std::memory_order_release);
    return &st;
  }
  return nullptr;
}

void UseTracker::record_open_locked(OpenStream& st, bool launcher) noexcept {
  UseEvent* e = st.open;
  if (e == nullptr) return;
  st.open_now.store(nullptr, std::memory_order_seq_cst);  // before the record (record_lazily_unlocked)
  const CUstream s = e->on;
  CUresult r = CUDA_SUCCESS;
  if (launcher) {
    r = TIERRT_CU(cuEventRecord, e->ev, s);
  } else if (s == CU_STREAM_LEGACY || s == nullptr) {
    // Our blocking stream runs after the legacy stream's earlier work.
    r = legacy_proxy_ != nullptr ? TIERRT_CU(cuEventRecord, e->ev, legacy_proxy_) : CUDA_ERROR_NOT_READY;
  } else {
    // Never into a capture: the event would be the graph's, not a record
    // (nor into one begun between the question and the record).
    const CaptureGate::Probe probe;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    r = TIERRT_CU(cuStreamIsCapturing, s, &cs);
    if (r == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r == CUDA_SUCCESS) r = TIERRT_CU(cuEventRecord, e->ev, s);
  }
  e->phase.store(r == CUDA_SUCCESS ? UsePhase::Recorded : UsePhase::Failed, std::memory_order_release);
  st.open = nullptr;
  st.recorded_at.store(window_clock_.now(), std::memory_order_relaxed);
  ++st.records;
  unref(e);
}

bool UseTracker::settle_event(UseEvent* e) noexcept {
  if (unrecorded(e)) return false;
  UsePhase ph = e->phase.load(std::memory_order_acquire);
  if (ph == UsePhase::Open) {
    // Open: it is its stream's open event (a flush or record ends that under
    // the stream's lock before the stream's slot goes).
    if (OpenStream* st = open_stream(e->on)) {
      std::lock_guard<RankedMutex> g(st->mu);
      if (e->phase.load(std::memory_order_acquire) == UsePhase::Open) {
        assert(st->open == e);
        record_open_locked(*st, /*launcher=*/false);
      }
    }
    ph = e->phase.load(std::memory_order_acquire);
  }
  assert(ph != UsePhase::Open);
  return ph == UsePhase::Recorded;
}

void UseTracker::settle(UseSlot* u) noexcept {
  if (u->ev == nullptr || unrecorded(u->ev) || settle_event(u->ev)) return;
  // Not recorded: complete once its stream is idle (the caller's reference goes).
  unref(u->ev);
  u->ev = &unrecorded_;
}

void UseTracker::flush(CUstream s, bool forget) noexcept {
  if (s == nullptr) s = CU_STREAM_LEGACY;
  OpenStream* st = open_stream(s);
  if (st == nullptr) return;
  std::lock_guard<RankedMutex> g(st->mu);
  if (st->key.load(std::memory_order_relaxed) != s) return;
  record_open_locked(*st, /*launcher=*/false);
  if (forget) st->key.store(nullptr, std::memory_order_release);
}

CUresult UseTracker::mark_unrecorded(std::span<Block* const> blocks, CUstream s) noexcept {
  // A use on this thread's per-thread default stream: no other thread can
  // ask that stream whether the use is over, so this thread waits for it
  // now, unless the stream is capturing (nothing of it runs yet).
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (drv::is_per_thread_stream_key(s) && TIERRT_CU(cuStreamIsCapturing, s, &cs) == CUDA_SUCCESS &&
      cs == CU_STREAM_CAPTURE_STATUS_NONE && TIERRT_CU(cuStreamSynchronize, s) == CUDA_SUCCESS)
    return CUDA_SUCCESS;
  CUresult r = CUDA_SUCCESS;
  for (Block* b : blocks) {
    UseSlot displaced;
    {
      std::lock_guard<RankedMutex> g(mu_);
      const UseSlot mark{s, &unrecorded_, clock_.fetch_add(1, std::memory_order_relaxed) + 1};
      const int slot = slot_of(b, s);
      if (slot >= 0) {
        unref_locked(b->uses[slot].ev);  // the stream's idleness implies it
        b->uses[slot] = mark;
      } else if (b->nuses < kMaxUseSlots) {
        b->uses[b->nuses++] = mark;
      } else {
        displaced = b->uses[0];  // its reference passes to us
        b->uses[0] = mark;
      }
      b->last_use.store(mark.at, std::memory_order_relaxed);
    }
    if (displaced.ev != nullptr) {
      const CUresult w = wait_host(displaced);
      if (r == CUDA_SUCCESS) r = w;
      unref(displaced.ev);
    }
  }
  return r;
}

int UseTracker::take_refs(Block* b, UseSlot* out, CUstream except) noexcept {
  int n = 0;
  {
    std::lock_guard<RankedMutex> g(mu_);
    n = copy_refs(b, out, except);
  }
  for (int i = 0; i < n; ++i) settle(&out[i]);
  return n;
}

CUresult UseTracker::wait_then_unref(CUstream s, std::span<const UseSlot> uses) noexcept {
  CUresult r = CUDA_SUCCESS;
  for (const UseSlot& u : uses) {
    // A use the stream cannot wait on is waited for on the host: `s` then
    // runs after it all the same.
    if (r == CUDA_SUCCESS && (unrecorded(u.ev) || TIERRT_CU(cuStreamWaitEvent, s, u.ev->ev, 0u) != CUDA_SUCCESS))
      r = wait_host(u);
    unref(u.ev);
  }
  return r;
}

namespace {

// One question to a stream that ends a capture it meets (a query, or a
// synchronize): asked only while the stream says it does not capture, with
// no capture beginning between the two calls (capture_gate.h).
CUresult probe_stream(CUstream s, bool synchronize) noexcept {
  const CaptureGate::Probe probe;
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  const CUresult q = TIERRT_CU(cuStreamIsCapturing, s, &cs);
  if (q != CUDA_SUCCESS) return q;
  if (cs != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return synchronize ? TIERRT_CU(cuStreamSynchronize, s) : TIERRT_CU(cuStreamQuery, s);
}

// A context synchronize ends every capture open in the context, another
// thread's too: it is made only while no capture is open in the process.
CUresult synchronize_context() noexcept {
  const CaptureGate::Probe probe;
  if (!probe.no_capture_open()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return TIERRT_CU(cuCtxSynchronize);
}

}  // namespace

CUresult UseTracker::poll_stream(CUstream s) noexcept {
  for (int polls = 0;; ++polls) {
    const CUresult r = probe_stream(s, /*synchronize=*/false);
    if (r != CUDA_ERROR_NOT_READY) return r;
    if (polls < 100) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

CUresult UseTracker::wait_host(const UseSlot& u) noexcept {
  // A failed wait on the event is asked again before anything wider.
  for (int attempt = 0; attempt < 2 && !unrecorded(u.ev); ++attempt)
    if (TIERRT_CU(cuEventSynchronize, u.ev->ev) == CUDA_SUCCESS) return CUDA_SUCCESS;
  // Another thread's per-thread default stream cannot be named here: only
  // the context can be waited for.
  if (drv::is_foreign_stream_key(u.stream)) return synchronize_context();
  const CUresult q = probe_stream(u.stream, /*synchronize=*/true);
  if (q == CUDA_SUCCESS || q == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) return q;
  // A failed synchronize: while the stream answers queries, it is polled.
  const CUresult p = poll_stream(u.stream);
  if (p == CUDA_SUCCESS || p == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) return p;
  // A stream destroyed since cannot be waited for: the context can.
  return synchronize_context();
}

bool UseTracker::completed(const UseSlot& u) noexcept {
  if (unrecorded(u.ev)) {
    if (drv::is_foreign_stream_key(u.stream)) return false;
    return probe_stream(u.stream, /*synchronize=*/false) == CUDA_SUCCESS;
  }
  return TIERRT_CU(cuEventQuery, u.ev->ev) == CUDA_SUCCESS;
}

CUresult UseTracker::wait_all(Block* b) noexcept {
  UseSlot uses[kMaxUses];
  const int n = take_refs(b, uses);
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; i < n; ++i) {
    if (r == CUDA_SUCCESS) r = wait_host(uses[i]);
    unref(uses[i].ev);
  }
  return r;
}

int UseTracker::recorded(const Block* b) noexcept {
  std::lock_guard<RankedMutex> g(mu_);
  return b->nuses + (b->lazy.load(std::memory_order_acquire) != nullptr ? 1 : 0);
}

CUresult UseTracker::forget(Block* b, bool synchronize) noexcept {
  UseSlot uses[kMaxUses];
  int n = 0;
  {
    std::lock_guard<RankedMutex> g(mu_);
    for (; n < b->nuses; ++n) uses[n] = b->uses[n];
    b->nuses = 0;
    // Its reference passes to us.
    if (UseEvent* x = b->lazy.exchange(nullptr, std::memory_order_acq_rel)) uses[n++] = UseSlot{x->on, x, kLazyUse};
  }
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; i < n; ++i) {
    if (synchronize && r == CUDA_SUCCESS) {
      settle(&uses[i]);
      r = wait_host(uses[i]);
    }
    unref(uses[i].ev);
  }
  return r;
}

bool UseTracker::retire_completed(Block* b) noexcept {
  UseSlot seen[kMaxUses];
  bool done[kMaxUses] = {};
  UseEvent* lazy = nullptr;  // the lazy use seen, before a settle may mark it unrecorded
  int n = 0;
  {
    std::lock_guard<RankedMutex> g(mu_);
    n = copy_refs(b, seen, nullptr);
    if (n > 0 && seen[n - 1].at == kLazyUse) lazy = seen[n - 1].ev;
  }
  for (int i = 0; i < n; ++i) {
    settle(&seen[i]);
    done[i] = completed(seen[i]);
  }
  int left = 0;
  {
    std::lock_guard<RankedMutex> g(mu_);
    int kept = 0;
    for (int i = 0; i < b->nuses; ++i) {
      bool complete = false;
      for (int j = 0; j < n && !complete; ++j)
        complete = done[j] && seen[j].stream == b->uses[i].stream && seen[j].at == b->uses[i].at;
      if (complete) unref_locked(b->uses[i].ev);
      else b->uses[kept++] = b->uses[i];
    }
    // The lazy use, unless a launch re-pointed it since (a use after the
    // one found complete): our reference kept `lazy` from being pooled and
    // stamped afresh meanwhile, so the same event is the same use.
    if (lazy != nullptr && done[n - 1] && b->lazy.compare_exchange_strong(lazy, nullptr, std::memory_order_acq_rel))
      unref_locked(lazy);
    b->nuses = kept;
    left = kept + (b->lazy.load(std::memory_order_acquire) != nullptr ? 1 : 0);
  }
  for (int i = 0; i < n; ++i) unref(seen[i].ev);
  return left == 0;
}

bool UseTracker::idle(const Block* b) noexcept {
  std::lock_guard<RankedMutex> g(mu_);
  return b->no_uses();
}

bool UseTracker::try_adopt(Block* b, CUstream s, UseEvent* e) noexcept {
  std::lock_guard<RankedMutex> g(mu_);
  if (b->nuses == kMaxUseSlots) return false;
  b->uses[b->nuses++] = UseSlot{s, e, clock_.fetch_add(1, std::memory_order_relaxed) + 1};
  return true;
}

CUevent UseTracker::take_timing_event() noexcept {
  {
    std::lock_guard<RankedMutex> g(mu_);
    if (!timing_free_.empty()) {
      const CUevent e = timing_free_.back();
      timing_free_.pop_back();
      return e;
    }
  }
  CUevent e = nullptr;
  return TIERRT_CU(cuEventCreate, &e, CU_EVENT_DEFAULT) == CUDA_SUCCESS ? e : nullptr;
}

CopyTimer UseTracker::start_timer(CUstream s) noexcept {
  CopyTimer t{take_timing_event(), take_timing_event()};
  if (t.begin == nullptr || t.end == nullptr || TIERRT_CU(cuEventRecord, t.begin, s) != CUDA_SUCCESS) release(&t);
  return t;
}

void UseTracker::stop_timer(CopyTimer* t, CUstream s) noexcept {
  if (t->end != nullptr && TIERRT_CU(cuEventRecord, t->end, s) != CUDA_SUCCESS) release(t);
}

std::uint64_t UseTracker::elapsed_ns(const CopyTimer& t) noexcept {
  double ns = 0;
  return device_ns_between(t.begin, t.end, &ns) && ns > 0 ? static_cast<std::uint64_t>(ns) : 0;
}

CUevent UseTracker::mark(CUstream s) noexcept {
  const CUevent e = take_timing_event();
  if (e == nullptr) return nullptr;
  if (TIERRT_CU(cuEventRecord, e, s) == CUDA_SUCCESS) return e;
  release_mark(e);
  return nullptr;
}

void UseTracker::release_mark(CUevent e) noexcept {
  if (e == nullptr) return;
  std::lock_guard<RankedMutex> g(mu_);
  timing_free_.push_back(e);
}

bool UseTracker::device_ns_between(CUevent from, CUevent to, double* ns) noexcept {
  float ms = 0;
  if (from == nullptr || to == nullptr || TIERRT_CU(cuEventElapsedTime, &ms, from, to) != CUDA_SUCCESS) return false;
  *ns = static_cast<double>(ms) * 1e6;
  return true;
}

void UseTracker::release(CopyTimer* t) noexcept {
  release_mark(t->begin);
  release_mark(t->end);
  t->begin = t->end = nullptr;
}

}  // namespace tierrt::alloc
