#include "mover.h"
#include "launch_announcements.h"

#include <pthread.h>

#include <cassert>
#include <chrono>
#include <cstdio>
#include <new>
#include <thread>

#include "steady_clock.h"
#include "driver/driver.h"

namespace tierrt::alloc {

struct Mover::Op {
  Op(Move k, Block* block) noexcept : kind(k), b(block), bytes(block->size) {}
  Move kind;
  Block* b;
  // Taken when the move is claimed: by the time the copy is reported, the
  // application may have freed the block and another allocation revived it.
  std::uint64_t bytes;
  std::uint32_t gen = 0;                 // spill: the block's generation when it started
  UseEvent* ev = nullptr;                // completes with the copy
  HostCopy host;                         // spill: where the bytes go; fetch: where they were
  CUmemGenericAllocationHandle dev = 0;  // fetch: the block's new chunk
  // fetch: the freed block that gave `dev` (still mapped onto it until the
  // copy, which waits for its uses, completed).
  Block* donor = nullptr;
  CopyTimer timer;
  // A copy was enqueued and could not be waited for: the memory it touches
  // is kept (never reused) rather than released under it.
  bool unsettled = false;
  bool fenced = false;  // fetch: holds its group's fence
  Op* next = nullptr;  // in the mover's queue
};

Mover::~Mover() {
  stop();
  if (d2h_ != nullptr) (void)TIERRT_CU(cuStreamDestroy, d2h_);
  if (h2d_ != nullptr) (void)TIERRT_CU(cuStreamDestroy, h2d_);
}

CUresult Mover::start() noexcept {
  int least = 0, greatest = 0;
  if (TIERRT_CU(cuCtxGetStreamPriorityRange, &least, &greatest) != CUDA_SUCCESS) least = greatest = 0;
  CUresult r = TIERRT_CU(cuStreamCreateWithPriority, &d2h_, CU_STREAM_NON_BLOCKING, least);
  if (r == CUDA_SUCCESS) r = TIERRT_CU(cuStreamCreateWithPriority, &h2d_, CU_STREAM_NON_BLOCKING, greatest);
  if (r != CUDA_SUCCESS) return r;
  auto body = [](void* self) -> void* {
    static_cast<Mover*>(self)->run();
    return nullptr;
  };
  if (pthread_create(&thread_, nullptr, body, this) != 0) return CUDA_ERROR_OPERATING_SYSTEM;
  running_ = true;
  // The thread's one driver call of its own happens now, not at some later
  // moment of the application's (where it would be a surprise to a count).
  // A thread without the context could finish no move (every spill would
  // fail and keep its host memory): then the allocator does not start.
  std::unique_lock<RankedMutex> l(queue_mu_);
  queued_.wait(l, [&] { return bound_; });
  if (bind_result_ == CUDA_SUCCESS) return CUDA_SUCCESS;
  l.unlock();
  pthread_join(thread_, nullptr);
  running_ = false;
  return bind_result_;
}

void Mover::stop() noexcept {
  if (!running_) return;
  blocks_.wait_moves_done();
  {
    std::lock_guard<RankedMutex> g(queue_mu_);
    stopping_ = true;
  }
  queued_.notify_all();
  pthread_join(thread_, nullptr);
  running_ = false;
}

CUresult Mover::record_done(Op* op, CUstream s) noexcept {
  op->ev = uses_.acquire();
  if (op->ev == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = TIERRT_CU(cuEventRecord, op->ev->ev, s);
  if (r != CUDA_SUCCESS) {
    uses_.unref(op->ev);
    op->ev = nullptr;
  }
  return r;
}

// ---- spill ----

bool Mover::stop_tiering(const char* why) noexcept {
  if (stopping_tiering_.exchange(true, std::memory_order_acq_rel)) return false;
  std::size_t n = 0;
  for (; why != nullptr && why[n] != '\0' && n + 1 < kWhyBytes; ++n) why_[n] = why[n];
  why_[n] = '\0';
  stopped_.store(why_, std::memory_order_release);
  if (MoveObserver* o = observer()) o->tiering_stopped(why_);
  return true;
}

SpillResult Mover::spill(Block* b, bool* launch_held) noexcept {
  if (tiering_stopped() != nullptr) return SpillResult::NotSpillable;
  auto* op = new (std::nothrow) Op(Move::Spill, b);
  if (op == nullptr) {
    spills_failed_.fetch_add(1, std::memory_order_relaxed);
    return SpillResult::Failed;
  }
  UseSlot uses[2 * kMaxUses];  // the block's, and its group's
  int nuses = 0;
  SpillResult r = claim_for_spill(op, uses, &nuses, launch_held);
  if (r != SpillResult::Started) {
    delete op;
    return r;
  }
  if (Group* g = b->group) {
    // The fence is up: no launch naming the group starts, and those being
    // enqueued finish; the copy then waits for every use of the group.
    wait_group_unpinned(*g);
    nuses += uses_.take_refs(g->record, uses + nuses);
  }
  if ((r = enqueue_spill(op, uses, nuses)) != SpillResult::Started) {
    if (r == SpillResult::Failed) spills_failed_.fetch_add(1, std::memory_order_relaxed);
    undo_spill(op, r);
    return r;
  }
  spills_.fetch_add(1, std::memory_order_relaxed);
  queue(op);
  return SpillResult::Started;
}

SpillResult Mover::claim_for_spill(Op* op, UseSlot* uses, int* nuses, bool* launch_held) noexcept {
  Block* b = op->b;
  auto l = blocks_.lock();
  const State st = b->st();
  if (!b->spillable || st == State::Freed || b->va == 0) return SpillResult::NotSpillable;
  if (!spill_asked_.load(std::memory_order_relaxed)) spill_asked_.store(true, std::memory_order_relaxed);
  if (st == State::Fetching) return SpillResult::Busy;
  if (st != State::Resident) return SpillResult::AlreadyMoving;
  if (held_ != 0 || b->captured || b->user_pins != 0 || b->ops_pending != 0 || b->ready.load() != nullptr)
    return SpillResult::Busy;
  // A graph that captured a launch naming the group may reach any member
  // whenever it is launched.
  if (b->group != nullptr && b->group->record->captured) return SpillResult::Busy;
  if (!backing_.reserve(*b, &op->host)) {
    blocks_.note_host_full(l);
    return SpillResult::HostFull;
  }
  op->bytes = op->host.size;
  // Against ensure_resident's fast path: publish SPILLING, then look at pins
  // and at the launches announced (launch_announcements.h).
  blocks_.set_state(b, State::Spilling, l);
  if (held_by_launch(b)) {
    blocks_.set_state(b, State::Resident, l);
    backing_.release(b, &op->host);
    if (launch_held != nullptr) *launch_held = true;
    return SpillResult::Busy;
  }
  op->gen = ++b->gen;
  if (b->group != nullptr) blocks_.raise_fence(b, l);
  blocks_.begin_move(b, Move::Spill, l);
  *nuses = uses_.take_refs(b, uses);
  return SpillResult::Started;
}

SpillResult Mover::enqueue_spill(Op* op, UseSlot* uses, int nuses) noexcept {
  Block* b = op->b;
  // Nothing moves while a stream that used the block is capturing.
  SpillResult why = SpillResult::Failed;
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; i < nuses && r == CUDA_SUCCESS; ++i) {
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    // A stream that cannot say is taken as capturing, unless its use is over
    // (another thread's per-thread default stream cannot be asked from here).
    const CUresult q = drv::is_foreign_stream_key(uses[i].stream)
                           ? CUDA_ERROR_INVALID_HANDLE
                           : TIERRT_CU(cuStreamIsCapturing, uses[i].stream, &cs);
    if ((q != CUDA_SUCCESS && TIERRT_CU(cuEventQuery, uses[i].ev->ev) != CUDA_SUCCESS) ||
        cs != CU_STREAM_CAPTURE_STATUS_NONE) {
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      why = SpillResult::Busy;
    }
  }
  if (r == CUDA_SUCCESS && (r = backing_.prepare_spill(b, &op->host)) == CUDA_ERROR_OUT_OF_MEMORY)
    why = SpillResult::HostFull;
  if (r != CUDA_SUCCESS) {
    for (int i = 0; i < nuses; ++i) uses_.unref(uses[i].ev);
    return why;
  }
  // The copy starts once every use recorded so far completed.
  if ((r = uses_.wait_then_unref(d2h_, {uses, static_cast<std::size_t>(nuses)})) != CUDA_SUCCESS) return why;
  op->timer = uses_.start_timer(d2h_);
  r = backing_.copy_to_host(*b, op->host, d2h_);
  if (r == CUDA_SUCCESS) {
    uses_.stop_timer(&op->timer, d2h_);
    r = record_done(op, d2h_);
  }
  if (r == CUDA_SUCCESS) return SpillResult::Started;
  op->unsettled = !settle(d2h_);  // a copy may be enqueued
  return why;
}

void Mover::undo_spill(Op* op, SpillResult why) noexcept {
  Block* b = op->b;
  if (!op->unsettled) backing_.release(b, &op->host);
  uses_.release(&op->timer);
  {
    auto l = blocks_.lock();
    if (why == SpillResult::HostFull) blocks_.note_host_full(l);
    if (b->st() == State::Spilling && b->gen == op->gen) blocks_.set_state(b, State::Resident, l);
    if (b->fences) blocks_.drop_fence(b, l);  // else an abort dropped it
  }
  blocks_.end_move(b, Move::Spill, false);
  delete op;
}

// ---- fetch ----

CUresult Mover::fetch(Block* b, CUstream consumer, bool demand, std::span<Block* const> pinned) noexcept {
  Op* op = nullptr;
  UseEvent* ready = nullptr;
  CUresult r = claim_for_fetch(b, demand, pinned, &op, &ready);
  if (r != CUDA_SUCCESS) return r;
  if (op != nullptr) {
    if ((r = enqueue_fetch(op, demand, pinned)) != CUDA_SUCCESS) {
      // A prefetch may not spill others: with no room yet it waits for a
      // later try (the policy's), which is no failure.
      (r == CUDA_ERROR_OUT_OF_MEMORY && !demand ? fetches_put_off_ : fetches_failed_)
          .fetch_add(1, std::memory_order_relaxed);
      undo_fetch(op);
      return r;
    }
    // Reported once its copy went out: a fetch that failed moved nothing.
    if (demand)
      if (MoveObserver* o = observer()) o->demand_fetch(*b);
    ready = publish_fetch(op, demand);
  }
  if (ready == nullptr) return CUDA_SUCCESS;
  if (consumer != nullptr && TIERRT_CU(cuStreamWaitEvent, consumer, ready->ev, 0u) != CUDA_SUCCESS)
    r = UseTracker::wait_host(UseSlot{h2d_, ready});  // the consumer then runs after the copy all the same
  uses_.unref(ready);
  return r;
}

CUresult Mover::claim_for_fetch(Block* b, bool demand, std::span<Block* const> pinned, Op** op,
                                UseEvent** ready) noexcept {
  auto l = blocks_.lock();
  const State st = blocks_.settle(b, l, pinned);
  if (st == State::Freed) return CUDA_ERROR_INVALID_VALUE;
  if (st == State::Resident || st == State::Fetching) {
    *ready = b->ready.load();
    if (*ready != nullptr) UseTracker::ref(*ready);
    return CUDA_SUCCESS;
  }
  if (held_ != 0) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  *op = new (std::nothrow) Op(Move::Fetch, b);
  if (*op == nullptr) {
    fetches_failed_.fetch_add(1, std::memory_order_relaxed);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  blocks_.set_state(b, State::Fetching, l);
  b->remapping = true;
  blocks_.begin_move(b, Move::Fetch, l);
  fetches_started_.fetch_add(1, std::memory_order_relaxed);
  if (demand) demand_fetches_started_.fetch_add(1, std::memory_order_relaxed);
  b->needed_since.store(demand ? kNeededOnDemand : 0, std::memory_order_relaxed);
  uses_.release_mark(b->late_marker.exchange(nullptr, std::memory_order_acq_rel));  // a launch's after the last report
  return CUDA_SUCCESS;
}

CUresult Mover::enqueue_fetch(Op* op, bool demand, std::span<Block* const> pinned) noexcept {
  Block* b = op->b;
  // Uses of the spilled block (remap: reads over the link) finish before its
  // VA is remapped.
  uses_.forget(b, /*synchronize=*/true);
  CUresult r = obtain_fetch_chunk(op, demand, pinned);
  if (r != CUDA_SUCCESS) return r;
  if (Group* g = b->group) {
    // A kernel of the group may reach the member on its host copy: none may
    // run from the remap until the copy is enqueued (a later one waits for
    // it: publish_fetch), and those enqueued before are done first.
    {
      auto l = blocks_.lock();
      blocks_.raise_group_fence(g, l);
    }
    op->fenced = true;
    wait_group_unpinned(*g);
    uses_.forget(g->record, /*synchronize=*/true);
  }
  assert(b->group == nullptr || (op->fenced && b->group->enqueuing.load() == 0));
  if ((r = backing_.enter_device(b, op->dev)) != CUDA_SUCCESS) {
    give_back_fetch_chunk(op);
    drop_fetch_fence(op);
    return r;
  }
  op->timer = uses_.start_timer(h2d_);
  r = backing_.copy_to_device(*b, h2d_);
  if (r == CUDA_SUCCESS) {
    uses_.stop_timer(&op->timer, h2d_);
    r = record_done(op, h2d_);
  }
  if (r != CUDA_SUCCESS) {
    // A copy may be enqueued: the VA leaves the chunk it writes only once
    // the copy is known done (unmapped under it, the copy would fault), and
    // the chunk is given back only once it is no longer mapped there. A copy
    // whose end stays unknown (the driver answers no wait: its context is
    // lost) keeps both, with the chunk's share of the budget, for good.
    if (settle(h2d_) && backing_.undo_enter_device(b) == CUDA_SUCCESS) give_back_fetch_chunk(op);
    op->dev = 0;
    op->donor = nullptr;  // kept out of the cache if its chunk was not given back
    drop_fetch_fence(op);
  }
  return r;
}

CUresult Mover::obtain_fetch_chunk(Op* op, bool demand, std::span<Block* const> pinned) noexcept {
  const std::size_t bytes = op->b->mapped;
  bool created = false;  // set only where a new chunk was made
  CUresult r = CUDA_SUCCESS;
  if (!arena_.obtain_chunk_at_once(bytes, &op->dev, &created)) {
    if (donors_ != nullptr && donors_->donate(bytes, h2d_, &op->dev, &op->donor)) {
      chunks_handed_over_.fetch_add(1, std::memory_order_relaxed);
      return CUDA_SUCCESS;
    }
    // Only a fetch a launch waits for may spill others or pass the budget.
    r = arena_.obtain_chunk(bytes, &op->dev, Claimant{demand, pinned, demand, true}, &created);
  }
  if (created) fetch_chunks_created_.fetch_add(1, std::memory_order_relaxed);
  return r;
}

void Mover::give_back_fetch_chunk(Op* op) noexcept {
  if (op->donor != nullptr)
    donors_->take_back(op->donor, op->dev);
  else
    arena_.give_chunk(op->dev, op->b->mapped);
  op->dev = 0;
  op->donor = nullptr;
}

void Mover::drop_fetch_fence(Op* op) noexcept {
  if (!op->fenced) return;
  op->fenced = false;
  auto l = blocks_.lock();
  blocks_.drop_group_fence(op->b->group, l);
}

void Mover::wait_group_unpinned(const Group& g) noexcept {
  // Launches that pinned the group before its fence went up are being
  // enqueued (group pins are taken last): they end soon, and none starts.
  for (int spins = 0; g.record->pins.load(std::memory_order_seq_cst) != 0; ++spins) {
    if (spins < 100) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void Mover::undo_fetch(Op* op) noexcept {
  Block* b = op->b;
  uses_.release(&op->timer);
  {
    auto l = blocks_.lock();
    b->remapping = false;
    blocks_.set_state(b, State::Spilled, l);  // still spilled
  }
  blocks_.end_move(b, Move::Fetch, false);  // wakes those waiting for the remap
  delete op;
}

UseEvent* Mover::publish_fetch(Op* op, bool demand) noexcept {
  Block* b = op->b;
  UseEvent* ev = op->ev;  // op belongs to the mover once queued
  UseTracker::ref(ev);    // the block's (ready)
  UseTracker::ref(ev);    // the caller's
  {
    auto l = blocks_.lock();
    b->dev = op->dev;
    op->dev = 0;
    op->host = b->host;  // released once the copy completed
    b->host = HostCopy{};
    b->ready.store(ev, std::memory_order_release);
    b->remapping = false;
    if (op->fenced) {
      // Every later launch naming the group waits for this copy.
      Block* record = b->group->record;
      UseTracker::ref(ev);
      uses_.unref(record->ready.exchange(ev, std::memory_order_acq_rel));
      op->fenced = false;
      blocks_.drop_group_fence(b->group, l);
    }
    blocks_.fetch_queued(l);
  }
  fetches_.fetch_add(1, std::memory_order_relaxed);
  if (demand) demand_fetches_.fetch_add(1, std::memory_order_relaxed);
  bytes_fetched_.fetch_add(b->size, std::memory_order_relaxed);
  uses_.touch(b);
  queue(op);
  blocks_.remap_done();
  return ev;
}

// ---- the mover thread ----

void Mover::queue(Op* op) noexcept {
  {
    // Linked through the ops themselves: queueing allocates nothing, so a
    // copy already enqueued is always finalised.
    std::lock_guard<RankedMutex> g(queue_mu_);
    op->next = nullptr;
    (queue_tail_ != nullptr ? queue_tail_->next : queue_head_) = op;
    queue_tail_ = op;
  }
  queued_.notify_one();
}

void Mover::run() noexcept {
  // Named so that top -H, gdb and profilers tell tierrt's threads apart.
  pthread_setname_np(pthread_self(), "tierrt-mover");
  const CUresult bound = TIERRT_CU(cuCtxSetCurrent, arena_.context());
  std::unique_lock<RankedMutex> l(queue_mu_);
  bind_result_ = bound;
  bound_ = true;
  queued_.notify_all();
  if (bound != CUDA_SUCCESS) return;
  for (;;) {
    queued_.wait(l, [&] { return stopping_ || queue_head_ != nullptr; });
    if (queue_head_ == nullptr) return;  // stopping, and nothing left
    Op* op = queue_head_;
    queue_head_ = op->next;
    if (queue_head_ == nullptr) queue_tail_ = nullptr;
    l.unlock();
    finalize(op);
    l.lock();
  }
}

CUresult Mover::wait_copy(const Op& op) noexcept {
  if (TIERRT_CU(cuEventSynchronize, op.ev->ev) == CUDA_SUCCESS) return CUDA_SUCCESS;
  // The stream the copy went out on: once it is idle, so is the copy.
  return settle(op.kind == Move::Spill ? d2h_ : h2d_) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

bool Mover::settle(CUstream s) noexcept {
  constexpr int kWaits = 3, kPolls = 2000, kPollFailures = 3;
  for (int i = 0; i < kWaits; ++i)
    if (TIERRT_CU(cuStreamSynchronize, s) == CUDA_SUCCESS) return true;
  // Polled for up to about 2 s: only the mover's own copies run there.
  int failures = 0;
  for (int i = 0; i < kPolls; ++i) {
    const CUresult r = TIERRT_CU(cuStreamQuery, s);
    if (r == CUDA_SUCCESS) return true;
    if (r != CUDA_ERROR_NOT_READY && ++failures >= kPollFailures) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

void Mover::finalize(Op* op) noexcept {
  op->unsettled = wait_copy(*op) != CUDA_SUCCESS;
  report(*op);  // an aborted spill's copy ran all the same: it measures the link
  uses_.release(&op->timer);
  if (op->kind == Move::Spill)
    finalize_spill(op);
  else
    finalize_fetch(op);
  // Host memory nobody needs now: an aborted spill's copy, or the copy a
  // fetched block was read from (kept if the copy may still touch it).
  if (!op->unsettled) backing_.release(op->b, &op->host);
  uses_.unref(op->ev);
  blocks_.end_move(op->b, op->kind, true);
  delete op;
}

void Mover::finalize_spill(Op* op) noexcept {
  Block* b = op->b;
  const char* broken = nullptr;
  bool unmap = false;
  {
    auto l = blocks_.lock();
    if (b->st() != State::Spilling || b->gen != op->gen) return;  // aborted
    broken = broken_spill_invariant(*b);
    if (op->unsettled || broken != nullptr || tiering_stopped() != nullptr) {
      // The copy's end is unknown, an invariant is broken or tiering
      // stopped: the block stays, its device memory untouched (the copy
      // only read it).
      spills_failed_.fetch_add(1, std::memory_order_relaxed);
      ++b->gen;
      blocks_.set_state(b, State::Resident, l);
      if (b->fences) blocks_.drop_fence(b, l);
    } else {
      b->remapping = true;  // no pins exist (checked above), and none may start
      unmap = true;
    }
  }
  if (broken != nullptr) {  // told with the lock released: the observer logs
    char why[kWhyBytes];
    std::snprintf(why, sizeof why, "the mover found %s", broken);
    stop_tiering(why);
  }
  if (!unmap) return;
  // The copy completed (wait_copy saw its event or its stream finish), and
  // with it every use it waited for: the device chunk may go. No launch
  // that may reach the member is being enqueued (its group's fence).
  assert(b->group == nullptr || (b->fences && b->group->enqueuing.load() == 0));
  const CUresult r = backing_.leave_device(b, op->host);
  if (r == CUDA_SUCCESS) arena_.give_chunk(b->dev, b->mapped);
  auto l = blocks_.lock();
  b->remapping = false;
  if (r == CUDA_SUCCESS) {
    b->dev = 0;
    b->host = op->host;
    op->host = HostCopy{};
    bytes_spilled_.fetch_add(b->size, std::memory_order_relaxed);
    spills_done_.fetch_add(1, std::memory_order_relaxed);
    blocks_.set_state(b, State::Spilled, l);
  } else {
    spills_failed_.fetch_add(1, std::memory_order_relaxed);
    ++b->gen;
    blocks_.set_state(b, State::Resident, l);
  }
  // The VA is on the host copy (or stays on the chunk): the window is over.
  if (b->fences) blocks_.drop_fence(b, l);
}

// Checked in every build: a spill about to unmap its block has no launch
// pin (a use aborts a spill); unmapping a pinned block would fault a kernel
// that was given its address. Containing it costs one spill.
const char* Mover::broken_spill_invariant(const Block& b) noexcept {
  if (injected_.exchange(false, std::memory_order_relaxed)) return "a broken invariant injected by a test";
  if (b.pins.load(std::memory_order_seq_cst) != 0) return "a spilling block pinned by a launch";
  return nullptr;
}

void Mover::finalize_fetch(Op* op) noexcept {
  Block* b = op->b;
  UseEvent* done = nullptr;
  UseEvent* group_done = nullptr;
  {
    auto l = blocks_.lock();
    if (b->ready.load() == op->ev) {  // else a free took the event over
      done = op->ev;
      b->ready.store(nullptr, std::memory_order_release);
      blocks_.set_state(b, State::Resident, l);
    }
    if (b->group != nullptr && b->group->record->ready.load() == op->ev) {
      group_done = op->ev;
      b->group->record->ready.store(nullptr, std::memory_order_release);
    }
  }
  uses_.unref(done);
  uses_.unref(group_done);
  // A donor whose uses' end is unknown (so is the copy's) keeps its VA on
  // the chunk, out of the cache, for good.
  if (op->donor != nullptr && !op->unsettled) donors_->retire(op->donor);
  op->donor = nullptr;
}

void Mover::report(const Op& op) noexcept {
  MoveObserver* o = observer();
  const std::uint64_t ns = o != nullptr ? UseTracker::elapsed_ns(op.timer) : 0;
  if (ns > 0)
    o->copy_done(op.kind == Move::Spill ? MoveObserver::Direction::ToHost : MoveObserver::Direction::ToDevice,
                 op.bytes, ns);
  if (op.kind != Move::Fetch) return;
  const std::uint64_t since = op.b->needed_since.exchange(0, std::memory_order_relaxed);
  const CUevent marker = op.b->late_marker.exchange(nullptr, std::memory_order_acq_rel);
  // How long the launch's stream waited at the marker for the copy, on the
  // device's clock: 0 when it got there after the copy ended (or has not yet).
  const bool on_device = marker != nullptr && op.timer.end != nullptr;
  double waited = 0;
  if (on_device && !(UseTracker::device_ns_between(marker, op.timer.end, &waited) && waited > 0)) waited = 0;
  const auto waited_ns = static_cast<std::uint64_t>(waited);
  if (o != nullptr && since == kNeededOnDemand && waited_ns > 0) o->demand_fetch_waited(*op.b, waited_ns);
  if (o != nullptr && since > kNeededOnDemand) {
    // Without a marker the host's clock says: the launch came while the copy ran.
    const std::uint64_t now = steady_ns();
    const std::uint64_t late_ns = on_device ? waited_ns : (now > since ? now - since : 1);
    if (late_ns > 0) o->late_fetch(*op.b, late_ns);
  }
  uses_.release_mark(marker);
}

void Mover::fill_stats(Stats* s) const noexcept {
  s->spills = spills_.load(std::memory_order_relaxed);
  s->spills_done = spills_done_.load(std::memory_order_relaxed);
  s->spills_failed = spills_failed_.load(std::memory_order_relaxed);
  s->fetches_started = fetches_started_.load(std::memory_order_relaxed);
  s->demand_fetches_started = demand_fetches_started_.load(std::memory_order_relaxed);
  s->fetches = fetches_.load(std::memory_order_relaxed);
  s->demand_fetches = demand_fetches_.load(std::memory_order_relaxed);
  s->fetches_failed = fetches_failed_.load(std::memory_order_relaxed);
  s->fetches_put_off = fetches_put_off_.load(std::memory_order_relaxed);
  s->bytes_spilled = bytes_spilled_.load(std::memory_order_relaxed);
  s->bytes_fetched = bytes_fetched_.load(std::memory_order_relaxed);
  s->chunks_handed_over = chunks_handed_over_.load(std::memory_order_relaxed);
  s->fetch_chunks_created = fetch_chunks_created_.load(std::memory_order_relaxed);
}

}  // namespace tierrt::alloc
