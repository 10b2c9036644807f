#include "runtime/policy_thread.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <chrono>

#include "driver/driver.h"
#include "policies/link_model.hpp"
#include "policies/policy_engine.hpp"
#include "host_clock.h"
#include "log.h"
#include "runtime/recorder.h"

namespace tierrt {

PolicyThread::PolicyThread(alloc::Allocator& allocator, CUcontext ctx, std::uint64_t budget,
                           const policy::LinkModel& link, Recorder* recorder, bool acts)
    : allocator_(allocator), recorder_(recorder), ctx_(ctx), ring_(new Slot[kSlots]), acts_(acts) {
  // Launches are most of what is posted, and post_launch writes one in a
  // slot that holds one already: the first lap round the ring would
  // otherwise re-initialise each slot's message (12 words) as it goes.
  for (std::uint64_t i = 0; i < kSlots; ++i) {
    ring_[i].turn.store(i, std::memory_order_relaxed);
    ring_[i].message.emplace<LaunchUses>();
  }
  policy::PolicyEngine::Options o;
  o.budget = budget;
  o.link = link;
  policy_ = std::make_unique<policy::PolicyEngine>(o);
  thread_ = std::thread([this] { run(); });
}

PolicyThread::~PolicyThread() { stop(); }

void PolicyThread::stop() noexcept {
  stopping_.store(true, std::memory_order_release);
  wake_.wake();
  if (thread_.joinable()) thread_.join();
}

// Only what can end a held launch needs a time; a launch names up to
// hundreds of blocks, and a clock read per use would show.
void PolicyThread::post(const policy::Event& e) noexcept {
  push(e, e.kind != policy::EventKind::Use ? steady_ns() : 0, e.kind == policy::EventKind::Step);
}

void PolicyThread::post_launch(policy::LaunchSeq seq, policy::StreamId sid, CUstream stream, bool may_time,
                               std::span<alloc::Block* const> named) noexcept {
  const bool timed = may_time && DeviceClock::due(seq, clock_shift_.load(std::memory_order_relaxed)) &&
                     clock_.record(seq, stream);
  const std::size_t inline_uses = std::min(named.size(), kUsesPerSlot);
  // Written in the slot itself: no launch record built on the stack and copied.
  push_with(
      [&](Message& m) {
        auto* l = std::get_if<LaunchUses>(&m);
        if (l == nullptr) l = &m.emplace<LaunchUses>();
        l->launch = policy::Event::launch(seq, 0, sid);
        l->timed = timed;
        l->count = static_cast<std::uint8_t>(inline_uses);
        for (std::size_t i = 0; i < inline_uses; ++i) l->blocks[i] = named[i]->va;
      },
      clock_.ok() ? 0 : steady_ns(), false);
  for (alloc::Block* b : named.subspan(inline_uses)) push(policy::Event::use(b->va, seq, sid), 0, false);
}

void PolicyThread::post_demand_fetch(policy::BlockId block) noexcept { push(DemandFetch{block}, 0, false); }

void PolicyThread::post_late_fetch(policy::BlockId block, std::uint64_t late_ns) noexcept {
  push(LateFetch{block, late_ns}, 0, false);
}

template <class Item>
void PolicyThread::push(const Item& item, std::uint64_t ns, bool wakes) noexcept {
  push_with([&](Message& m) { m = item; }, ns, wakes);
}

// Multi-producer ring: each slot's turn says whose write or read is next.
template <class Write>
void PolicyThread::push_with(Write&& write, std::uint64_t ns, bool wakes) noexcept {
  std::uint64_t pos = head_.load(std::memory_order_relaxed);
  for (;;) {
    Slot& s = ring_[pos & (kSlots - 1)];
    std::uint64_t turn = s.turn.load(std::memory_order_acquire);
    if (turn == pos) {
      // Sequentially consistent: the napping protocol's store (header).
      if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) {
        write(s.message);
        s.ns = ns;
        s.turn.store(pos + 1, std::memory_order_release);
        // The next post's slot was last touched a whole ring ago (4 MiB),
        // when the policy thread took it: fetched now, it is in cache
        // when that post comes.
        const char* next = reinterpret_cast<const char*>(&ring_[(pos + 1) & (kSlots - 1)]);
        __builtin_prefetch(next, 1);
        __builtin_prefetch(next + sizeof(Slot) - 1, 1);
        break;
      }
    } else if (turn < pos + 1) {
      dropped_.fetch_add(1, std::memory_order_relaxed);  // full: the plan degrades, nothing breaks
      return;
    } else {
      pos = head_.load(std::memory_order_relaxed);
    }
  }
  // The thread polls (poll_ns) while work comes: waking it per launch
  // would cost the launch a futex call. A step marker (planning starts)
  // wakes it, and so does any post to a napping thread (once per idle
  // spell): an increment and a futex call, never a lock (wake_word.h).
  if ((napping_.load(std::memory_order_seq_cst) && napping_.exchange(false, std::memory_order_seq_cst)) ||
      (wakes && sleeping_.load(std::memory_order_acquire))) wake_.wake();
}

void PolicyThread::wake() noexcept { wake_.wake(); }

bool PolicyThread::claimed() const noexcept { return head_.load(std::memory_order_seq_cst) != tail_; }

bool PolicyThread::may_nap(std::uint64_t now_ns) const noexcept {
  return now_ns - last_taken_ns_ >= kNapAfterNs && samples_read_ == samples_.size() &&
         (recalled_ || allocator_.tiering_stopped() == nullptr);
}

bool PolicyThread::ready() const noexcept {
  return ring_[tail_ & (kSlots - 1)].turn.load(std::memory_order_acquire) == tail_ + 1;
}

bool PolicyThread::take(Message* m, std::uint64_t* ns) noexcept {
  Slot& s = ring_[tail_ & (kSlots - 1)];
  if (s.turn.load(std::memory_order_acquire) != tail_ + 1) return false;
  *m = s.message;
  *ns = s.ns;
  s.turn.store(tail_ + kSlots, std::memory_order_release);
  ++tail_;
  taken_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void PolicyThread::run() {
  pthread_setname_np(pthread_self(), "tierrt-policy");  // for top -H, gdb, profilers
  // Without the engine's context the device clock's reads come back lost and
  // the plan runs on modeled times: degraded, never wrong, so carry on.
  (void)TIERRT_CU(cuCtxSetCurrent, ctx_);
  Message m;
  std::uint64_t ns = 0;
  last_taken_ns_ = steady_ns();
  // The launches' open use events whose window passed are recorded here, at
  // each turn, rather than by a launch (use_tracker.h).
  allocator_.set_background_use_records(true);
  for (;;) {
    const std::uint64_t taken_before = taken_.load(std::memory_order_relaxed);
    try {
      if (inject_exception_.exchange(false, std::memory_order_relaxed))
        throw std::runtime_error("an exception injected by a test");
      while (!failed_ && take(&m, &ns)) handle(m, ns);
      if (taken_.load(std::memory_order_relaxed) != taken_before) last_taken_ns_ = steady_ns();
      if (!failed_) read_clock();
    } catch (const std::exception& x) {
      // Whatever goes wrong in the planner must not take the job down, and
      // what it left half done cannot be trusted to move bytes: tiering
      // stops (one log line, from the allocator's observer).
      char why[160];
      std::snprintf(why, sizeof why, "the planner threw (%s)", x.what());
      if (acts_) allocator_.stop_tiering(why);
      else TIERRT_LOG(Warn, "%s: launches are no longer timed on the device for the recording", why);
      failed_ = true;
    }
    // Stopped here or by the mover: bring back what fits, once.
    if (!recalled_ && allocator_.tiering_stopped() != nullptr) {
      recalled_ = true;
      const std::size_t left = allocator_.recall();
      if (left > 0) TIERRT_LOG(Info, "%zu spilled blocks stay on the host until used (the budget is full)", left);
    }
    while (failed_ && take(&m, &ns)) {
    }  // drained, not planned: the reactive policy is in charge
    allocator_.record_aged_uses();
    if (stopping_.load(std::memory_order_acquire)) {
      allocator_.set_background_use_records(false);
      return;
    }
    // What wake() is for ends either sleep: with a poll of up to 1 ms, the
    // timed one may not leave a stop of tiering to its timeout.
    const auto called = [&] {
      return stopping_.load(std::memory_order_acquire) || inject_exception_.load(std::memory_order_relaxed) ||
             (!recalled_ && allocator_.tiering_stopped() != nullptr);
    };
    // Each look at what ends a sleep comes after the read of the epoch it
    // sleeps on (wake_word.h): a wake between the look and the sleep ends it.
    if (may_nap(steady_ns())) {
      napping_.store(true, std::memory_order_seq_cst);
      naps_.fetch_add(1, std::memory_order_relaxed);
      for (std::uint32_t e = wake_.epoch(); !claimed() && !called(); e = wake_.epoch()) wake_.sleep(e, 0);
      napping_.store(false, std::memory_order_relaxed);
      last_taken_ns_ = steady_ns();  // poll again until the post lands
      continue;
    }
    turns_.fetch_add(1, std::memory_order_relaxed);
    sleeping_.store(true, std::memory_order_release);
    const std::uint64_t until = steady_ns() + poll_ns();
    for (std::uint32_t e = wake_.epoch(); !ready() && !called(); e = wake_.epoch()) {
      const std::uint64_t now = steady_ns();
      if (now >= until) break;
      wake_.sleep(e, until - now);
    }
    sleeping_.store(false, std::memory_order_release);
  }
}

std::uint64_t PolicyThread::poll_ns() const {
  const bool prompt = acts_ && !failed_ && (policy_->moves_ahead() || !deferred_.empty() || armed_.armed() != 0);
  return prompt ? kPollNs : kCalmPollNs;
}

void PolicyThread::handle(const Message& m, std::uint64_t ns) {
  if (const auto* e = std::get_if<policy::Event>(&m)) {
    feed(*e, ns);
  } else if (const auto* l = std::get_if<LaunchUses>(&m)) {
    handle_launch(*l, ns);
  } else if (const auto* d = std::get_if<DemandFetch>(&m)) {
    report_demand_fetch(*d);
  } else {
    report_late_fetch(std::get<LateFetch>(m));
  }
  if (!told_overlong_ && policy_->overlong_steps() != 0) {
    told_overlong_ = true;
    TIERRT_LOG(Warn,
               "a step ran past %zu events (launches, the blocks they name, allocations) and is not learned: "
               "blocks move reactively until a shorter step comes (tierrt_mark_step marks where steps end)",
               policy_->max_step_events());
  }
}

void PolicyThread::handle_launch(const LaunchUses& l, std::uint64_t ns) {
  if (l.timed && samples_.size() - samples_read_ < DeviceClock::kSlots) samples_.push_back(l.launch.a);
  feed(l.launch, ns);
  for (std::uint8_t i = 0; i < l.count; ++i) feed(policy::Event::use(l.blocks[i], l.launch.a, l.launch.stream), 0);
}

// A report names a block by address; one from before the step is not the plan's.
void PolicyThread::report_demand_fetch(const DemandFetch& r) {
  sample_densely();
  const auto ordinal = policy_->ordinal_of(r.block);
  if (!ordinal) return;
  policy_->report_demand_fetch(*ordinal);
  demand_reports_.fetch_add(1, std::memory_order_relaxed);
}

void PolicyThread::report_late_fetch(const LateFetch& r) {
  sample_densely();
  const auto ordinal = policy_->ordinal_of(r.block);
  if (!ordinal) return;
  policy_->report_late(*ordinal, static_cast<double>(r.late_ns));
}

void PolicyThread::feed(const policy::Event& e, std::uint64_t ns) {
  using policy::EventKind;
  if (e.kind == EventKind::Use && held_) {
    held_uses_.push_back(e);
    return;
  }
  if (e.kind == EventKind::CopyRate) {  // posted by the mover whenever: no launch's end
    policy_->record(e);
    return;
  }
  if (held_) release_held_launch(ns);
  if (e.kind == EventKind::Launch) {
    act_on_launch(e.a);
    hold_launch(e, ns);
    return;
  }
  policy_->record(e);
  if (e.kind == EventKind::Step) publish();
  if (e.kind == EventKind::Alloc || e.kind == EventKind::Step) tag(e);
}

void PolicyThread::hold_launch(const policy::Event& launch, std::uint64_t ns) {
  held_ = true;
  held_launch_ = launch;
  held_ns_ = ns;
  held_uses_.clear();
}

// The event after the held launch, at `ns`, tells how long the launch took on
// the host; once the device clock has spoken, its mean is the better guess
// until the launch's own device time arrives. (Without a clock, the host's
// time is all there is; with one, a launch before its first reading is left
// unmeasured: zero.)
void PolicyThread::release_held_launch(std::uint64_t ns) {
  held_launch_.b = device_launch_ns_ > 0 ? static_cast<std::uint64_t>(device_launch_ns_)
                   : clock_.ok()          ? 0
                                          : ns - held_ns_;
  held_ = false;
  policy_->record(held_launch_);
  for (const policy::Event& u : held_uses_) policy_->record(u);
  publish();
}

// The launch is out, its uses recorded: spill what it used last, and bring
// back what it and the launch after it need (this thread learns of a launch
// only once it was issued).
void PolicyThread::act_on_launch(std::uint64_t seq) {
  last_launch_ = seq;
  // A reading queries the driver for the oldest sample's event (on simdev,
  // under the lock its stream's worker and the launching threads take to
  // enqueue): once per kEvery launches, as often as samples are taken at
  // their densest, and more seldom while the device is behind (read_clock).
  // Per launch it was a quarter of this thread's time in launch_hook_bench,
  // most of it waking the threads it held that lock from.
  if (seq >= clock_read_at_ + clock_read_gap_ || seq < clock_read_at_) {
    clock_read_at_ = seq;
    read_clock();
  }
  if (!acts_) return;
  // Ordinals name another step's blocks once a step ended or one was let go of.
  const std::size_t step = policy_->steps_completed() + policy_->overlong_steps();
  if (step != deferred_step_) {
    deferred_.clear();
    deferred_step_ = step;
  }
  retry_deferred();
  // Looked up once each: acting changes nothing the engine holds.
  const std::span<const policy::Trigger> now = policy_->triggers_ahead(0), next = policy_->triggers_ahead(1);
  act(now, policy::Action::Spill);
  for (const policy::Action a : {policy::Action::Prefetch, policy::Action::Refetch}) {
    act(now, a);
    act(next, a);
  }
  arm_ahead(seq);
}

// The prefetches of the launches after the next one, for the launching
// thread to carry out should it get there first (armed_prefetches.h): a
// trigger at launch `seq + i` is due once launch `seq + i - 1` went out.
void PolicyThread::arm_ahead(std::uint64_t seq) {
  armed_.disarm_passed(seq > kArmedGrace ? seq - kArmedGrace : 0);
  // One lookup for the 47 launches, not one each: about 8% less of this
  // thread's time in launch_hook_bench (perf samples, two runs each).
  const std::uint32_t next_op = policy_->launches_in_step();
  for (const policy::Trigger& t : policy_->triggers_ahead(2, kArmAhead)) {
    if (t.action != policy::Action::Prefetch && t.action != policy::Action::Refetch) continue;
    const auto id = id_for(t);
    alloc::Block* b = id ? allocator_.block_starting_at(*id) : nullptr;
    if (b != nullptr && off_device(b->st())) armed_.arm(b, *id, seq + (t.op - next_op) - 1);
  }
  armed_.publish();
}

void PolicyThread::run_due(std::uint64_t seq) noexcept {
  const auto still_at = [&](alloc::Block* b, CUdeviceptr va) { return allocator_.block_starting_at(va) == b; };
  armed_.run_due(seq, still_at, [&](alloc::Block* b) {
    if (!off_device(b->st())) return;
    if (allocator_.prefetch(b, nullptr) != CUDA_SUCCESS) return;  // no room: the plan's own try comes later
    prefetches_.fetch_add(1, std::memory_order_relaxed);
    prefetches_by_launchers_.fetch_add(1, std::memory_order_relaxed);
  });
}

// The allocator's per-class statistics: a block allocated in a step gets the
// class its ordinal had in the step learned last; at a step's end, the blocks
// from before it get theirs (the persistent ones).
void PolicyThread::tag(const policy::Event& e) {
  const policy::StepTimeline* tl = policy_->planner().last_timeline();
  if (!tl) return;
  auto tag_of = [](policy::BlockId id, policy::LifetimeClass c) {
    return alloc::Allocator::ClassTag{id, static_cast<std::uint8_t>(1 + static_cast<int>(c))};
  };
  if (e.kind == policy::EventKind::Alloc) {
    const auto ord = policy_->ordinal_of(e.a);
    if (ord && *ord < tl->by_ordinal.size()) {
      const alloc::Allocator::ClassTag one[] = {tag_of(e.a, tl->blocks[tl->by_ordinal[*ord]].cls)};
      allocator_.set_classes(one);
    }
    return;
  }
  // Every block that lived through the step, at once (1e5 of them took two
  // lock holds each).
  tags_.clear();
  for (const policy::BlockRecord& r : tl->blocks)
    if (r.predates_step()) tags_.push_back(tag_of(r.id, r.cls));
  allocator_.set_classes(tags_);
}

void PolicyThread::read_clock() {
  while (samples_read_ < samples_.size()) {
    const std::uint64_t seq = samples_[samples_read_];
    double ns = 0;
    const auto r = last_sample_ == UINT64_MAX ? DeviceClock::Read::Lost
                                                : clock_.elapsed_ns(last_sample_, seq, &ns);
    if (r == DeviceClock::Read::NotYet) {
      // The device is behind the host by this many launches at least
      // (a long kernel, a queue the host filled ahead): asking again after
      // kEvery more mostly hears "not yet" again, and each query meets the
      // launching threads in the driver. The gap doubles while the answer
      // stays "not yet" (each turn's end still asks), and closes at the
      // first sample read.
      clock_read_gap_ = std::min(clock_read_gap_ * 2, kMaxClockReadGap);
      clock_not_yet_.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    if (r == DeviceClock::Read::Ready) {
      // The launches after the last sample, up to this one, shared this time.
      const double each = ns / static_cast<double>(seq - last_sample_);
      policy_->set_launch_durations(last_sample_ + 1, seq + 1, static_cast<std::uint64_t>(each));
      if (recorder_) recorder_->set_launch_durations(last_sample_ + 1, seq + 1, static_cast<std::uint64_t>(each));
      device_launch_ns_ = device_launch_ns_ > 0 ? 0.9 * device_launch_ns_ + 0.1 * each : each;
    }
    last_sample_ = seq;
    ++samples_read_;
    clock_samples_read_.fetch_add(1, std::memory_order_relaxed);
    clock_read_gap_ = DeviceClock::kEvery;
  }
  if (samples_read_ > 1024) {  // keep the vector small
    samples_.erase(samples_.begin(), samples_.begin() + static_cast<std::ptrdiff_t>(samples_read_));
    samples_read_ = 0;
  }
}

// A miss means the plan's timing may be off: the launch durations it is
// made from are measured densely again from now on.
void PolicyThread::sample_densely() {
  clock_alarm_ = true;
  clock_shift_.store(0, std::memory_order_relaxed);
  clock_quiet_since_ = last_launch_;
}

// At a step's end: a step without a miss, after one the planner learned
// from, halves the clock's sampling rate; a step with one keeps it dense.
// A recording keeps it dense: tierrt-replay models each launch from its
// recorded device time.
void PolicyThread::adapt_clock(std::uint64_t steps, std::uint64_t mispredictions) {
  const bool missed = clock_alarm_ || mispredictions != clock_mispredictions_;
  const unsigned shift = clock_shift_.load(std::memory_order_relaxed);
  if (missed || steps < 2 || recorder_ != nullptr) clock_shift_.store(0, std::memory_order_relaxed);
  else if (shift < DeviceClock::kMaxShift) clock_shift_.store(shift + 1, std::memory_order_relaxed);
  clock_mispredictions_ = mispredictions;
  clock_alarm_ = false;
  clock_quiet_since_ = last_launch_;
}

// No step has ended and nothing missed for kUnlearnedLaunches << shift
// launches: half as many samples. Not in a recorded run (adapt_clock).
void PolicyThread::back_off_clock() {
  const unsigned shift = clock_shift_.load(std::memory_order_relaxed);
  if (shift >= DeviceClock::kMaxShift || recorder_ != nullptr || last_launch_ < clock_quiet_since_ ||
      last_launch_ - clock_quiet_since_ < (kUnlearnedLaunches << shift))
    return;
  clock_shift_.store(shift + 1, std::memory_order_relaxed);
  clock_quiet_since_ = last_launch_;
}

void PolicyThread::publish() {
  const std::uint64_t mispredicted = policy_->planner().mispredictions();
  mispredictions_.store(mispredicted, std::memory_order_relaxed);
  const std::uint64_t steps = policy_->steps_completed();
  if (steps != steps_turned_) adapt_clock(steps, mispredicted);
  else back_off_clock();
  // A step found without markers ended: the granule groups' boundaries turn
  // with it, as tierrt_mark_step turns them (Engine::note_step).
  if (steps != steps_turned_ && acts_ && !policy_->steps_marked()) allocator_.step_ended();
  steps_turned_ = steps;
  steps_learned_.store(steps, std::memory_order_relaxed);
  const policy::StepTimeline* tl = policy_->planner().last_timeline();
  if (!tl || steps == learned_.steps) return;  // learned_ is written by this thread only
  // In place: without markers a step may be a few launches long, and this
  // runs at each one's end.
  std::lock_guard lock(learned_mu_);
  learned_.steps = steps;
  learned_.signature = tl->signature;
  learned_.launches = static_cast<std::uint32_t>(tl->ops.size());
  learned_.classes.resize(tl->blocks.size());
  for (std::size_t i = 0; i < tl->blocks.size(); ++i) learned_.classes[i] = tl->blocks[i].cls;
}

PolicyThread::LearnedStep PolicyThread::learned_step() const {
  std::lock_guard lock(learned_mu_);
  return learned_;
}

std::optional<policy::BlockId> PolicyThread::id_for(const policy::Trigger& t) const {
  if (t.block != 0) return t.block;  // from before the step
  return policy_->block_of(t.ordinal);
}

alloc::Block* PolicyThread::block_for(const policy::Trigger& t) const {
  const auto id = id_for(t);
  return id ? allocator_.block_starting_at(*id) : nullptr;
}

// A spill waits (in the allocator) for the block's recorded uses on the device;
// a prefetch of a block already coming back is a no-op.
void PolicyThread::act(std::span<const policy::Trigger> triggers, policy::Action action) {
  for (const policy::Trigger& t : triggers)
    if (t.action == action && !carry_out(t) && deferred_.size() < kMaxDeferred) deferred_.push_back({t, 0});
}

// False when the trigger could not be carried out yet but may be later: a
// prefetch with no device memory free (the spills that make room are still
// copying), or a spill of a block a launch is enqueuing right now.
bool PolicyThread::carry_out(const policy::Trigger& t) {
  alloc::Block* b = block_for(t);
  if (!b) return true;
  const alloc::State st = b->st();
  const bool fetch = t.action == policy::Action::Prefetch || t.action == policy::Action::Refetch;
  if (fetch && off_device(st)) {
    const CUresult r = allocator_.prefetch(b, nullptr);
    if (r == CUDA_SUCCESS) prefetches_.fetch_add(1, std::memory_order_relaxed);
    return r != CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (t.action == policy::Action::Spill && st == alloc::State::Resident) {
    const alloc::SpillResult r = allocator_.spill(b);
    if (r == alloc::SpillResult::Started) spills_.fetch_add(1, std::memory_order_relaxed);
    return r != alloc::SpillResult::Busy;
  }
  return true;
}

void PolicyThread::retry_deferred() {
  std::erase_if(deferred_, [&](Deferred& d) { return carry_out(d.trigger) || ++d.tries >= kDeferredTries; });
}

}  // namespace tierrt
