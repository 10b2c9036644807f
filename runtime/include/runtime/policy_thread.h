// The planner, fed and obeyed off the launch path. Hooks post events into a
// lock-free ring (an atomic increment and a few stores); one thread drains
// it into the policy (policy::PolicyEngine), which learns the step and plans
// at its end, and carries out the plan's triggers (spill after a block's last
// use, prefetch ahead of its next) through the allocator. The launch path never plans,
// never waits for this thread, and never takes its lock.
//
// The thread learns of a launch after it was issued (it polls the ring every
// 50 us while the plan has a move ahead, every 1 ms while it only learns,
// rather than being woken per launch), so it acts on a launch's
// triggers as soon as it takes the launch from the ring (spills of blocks the
// launch used last, prefetches for it and for the launch after it) and only
// holds the launch back from the policy until its duration is known. An
// application that enqueues faster than the thread takes its launches (a
// backward pass, far ahead of the device) would reach a launch before its
// prefetch went out: so the thread also arms the prefetches of the launches
// after the next one (armed_prefetches.h), and the launching thread that gets
// to one first carries it out after its own launch (run_due). A prefetch
// may still arrive late: the launch then waits on it (or fetches on demand),
// correct either way, and the mover's report of it moves the prefetch earlier
// in the next step's plan.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <variant>
#include <vector>

#include "allocator/ranked_mutex.h"
#include "runtime/lock_rank.h"
#include "allocator/allocator.h"
#include "runtime/armed_prefetches.h"
#include "runtime/device_clock.h"
#include "runtime/wake_word.h"
#include "policies/event.hpp"
#include "policies/lifetime_class.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt {

namespace policy {
class PolicyEngine;
struct LinkModel;
}
class Recorder;

class PolicyThread {
 public:
  // Starts the thread with `ctx` current, planning for `link` (TIERRT_LINK).
  // `recorder` (may be null) also gets the launch durations the device clock measures.
  // A thread that does not `act` only learns and times launches (observe mode
  // and the reactive policy, when a run is recorded): it never moves a block.
  PolicyThread(alloc::Allocator& allocator, CUcontext ctx, std::uint64_t budget, const policy::LinkModel& link,
               Recorder* recorder, bool acts = true);
  ~PolicyThread();
  // Ends the thread once it is idle; posts after it are kept, never read.
  void stop() noexcept;

  void post(const policy::Event& e) noexcept;
  // Launch `seq` went out on `stream`, naming `named`; `may_time` unless
  // timing it on the device could disturb the stream (it is capturing a
  // graph). One slot carries the launch and its first kUsesPerSlot blocks;
  // the rest (rare) follow as use events. The host's clock is read only
  // where no device clock times launches: only then is a launch's host time
  // its duration (release_held_launch).
  void post_launch(policy::LaunchSeq seq, policy::StreamId sid, CUstream stream, bool may_time,
                   std::span<alloc::Block* const> named) noexcept;
  static constexpr std::size_t kUsesPerSlot = 8;
  // What the mover saw (see alloc::MoveObserver), for the current step's feedback.
  void post_demand_fetch(policy::BlockId block) noexcept;
  void post_late_fetch(policy::BlockId block, std::uint64_t late_ns) noexcept;

  // After launch `seq` went out, on the launching thread, while no capture
  // is open (Engine::note_launch): the prefetches armed for it
  // (armed_prefetches.h).
  bool prefetch_due(std::uint64_t seq) const noexcept { return armed_.due(seq); }  // one load
  void run_due(std::uint64_t seq) noexcept;

  std::uint64_t dropped() const noexcept { return dropped_.load(); }
  // Of prefetches_issued(), those a launching thread carried out.
  std::uint64_t prefetches_by_launchers() const noexcept { return prefetches_by_launchers_.load(); }
  std::uint64_t prefetches_issued() const noexcept { return prefetches_.load(); }
  std::uint64_t spills_issued() const noexcept { return spills_.load(); }
  // Demand fetches the mover reported of blocks of the step they arrived in.
  std::uint64_t demand_reports() const noexcept { return demand_reports_.load(); }
  // Demand fetches of blocks a followed plan had spilled, and steps planned.
  std::uint64_t mispredictions() const noexcept { return mispredictions_.load(); }
  std::uint64_t steps_learned() const noexcept { return steps_learned_.load(); }
  // The device clock's sampling period now, in launches (device_clock.h).
  std::uint64_t clock_period() const noexcept {
    return DeviceClock::kEvery << clock_shift_.load(std::memory_order_relaxed);
  }
  // Of its reads of the device clock, those answered "not yet" (the oldest
  // sample's launch had not run), and the samples read so far (timed, or
  // lost): for tests of how often it asks while the device is behind.
  std::uint64_t clock_not_yet() const noexcept { return clock_not_yet_.load(std::memory_order_relaxed); }
  std::uint64_t clock_samples_read() const noexcept { return clock_samples_read_.load(std::memory_order_relaxed); }
  // Launches after which, with no step's end and no miss among them, the
  // clock samples half as often (and again after twice as many, and so on,
  // to its sparsest): a job in which no step is found (no markers, and no
  // allocations for detection to find a period in, as under XLA's
  // preallocated pool) would otherwise record a timing event every kEvery-th
  // launch for as long as it runs, for a plan that never comes. A step
  // longer than this is sampled more sparsely from here until it ends, and
  // densely again for the steps after it (adapt_clock).
  static constexpr std::uint64_t kUnlearnedLaunches = std::uint64_t{1} << 17;

  // The shape of the step learned last, as of steps_learned() steps.
  struct LearnedStep {
    std::uint64_t steps = 0;      // steps_learned() when it was taken
    std::uint64_t signature = 0;  // of the step's token sequence
    std::uint32_t launches = 0;
    std::vector<policy::LifetimeClass> classes;  // by block, in the timeline's order
  };
  LearnedStep learned_step() const;

  // Wakes the thread now, wherever it sleeps (tiering stopped: spilled
  // blocks are called back at its next turn).
  void wake() noexcept;
  // How often the thread went to sleep for want of work (until a post wakes
  // it), and how many messages it took: for tests of the wake-up protocol.
  std::uint64_t naps() const noexcept { return naps_.load(std::memory_order_relaxed); }
  std::uint64_t messages_taken() const noexcept { return taken_.load(std::memory_order_relaxed); }
  // Its turns (a drain of the ring, then a sleep): how often it polled.
  std::uint64_t turns() const noexcept { return turns_.load(std::memory_order_relaxed); }
  bool napping() const noexcept { return napping_.load(std::memory_order_seq_cst); }
  // System calls made to wake it (posts to it napping, stop(), wake()).
  std::uint64_t wake_calls() const noexcept { return wake_.wake_calls(); }

  // The thread throws at its next turn, as a failing planner would: how
  // tests reach the containment (tiering stops, the job goes on).
  void inject_exception() noexcept {
    inject_exception_.store(true, std::memory_order_relaxed);
    wake();
  }

 private:
  // What a slot carries: an event, or one of the mover's reports.
  // A launch and the blocks it named, in one slot: a launch costs the
  // launching thread one claim of the ring, not one per block.
  struct LaunchUses {
    policy::Event launch;
    bool timed = false;  // the device clock took a sample right after it
    std::uint8_t count = 0;
    policy::BlockId blocks[kUsesPerSlot];
  };
  struct DemandFetch {
    policy::BlockId block;
  };
  struct LateFetch {
    policy::BlockId block;
    std::uint64_t late_ns;
  };
  using Message = std::variant<policy::Event, LaunchUses, DemandFetch, LateFetch>;
  // Two whole cache lines (a launch's record is 104 bytes): unaligned, a
  // slot spanned three, and the post's prefetch of the next one missed the
  // middle line.
  struct alignas(64) Slot {
    std::atomic<std::uint64_t> turn{0};
    Message message;
    std::uint64_t ns = 0;
  };
  static_assert(sizeof(Slot) == 128);
  // A launch takes one slot (with up to kUsesPerSlot blocks): room for
  // tens of thousands of launches between two turns of the thread.
  static constexpr std::uint64_t kSlots = 1u << 15;

  // `item`: one of Message's alternatives. `ns`: the host's time the slot
  // carries (0: none); `wakes`: the thread is woken rather than left to its
  // next poll.
  template <class Item>
  void push(const Item& item, std::uint64_t ns, bool wakes) noexcept;
  // The same, the slot's message written by write(Message&) in place.
  template <class Write>
  void push_with(Write&& write, std::uint64_t ns, bool wakes) noexcept;
  bool ready() const noexcept;  // the next slot is written
  // How late the thread may learn of a launch while the plan has a move
  // ahead (PolicyEngine::moves_ahead), a trigger deferred or a prefetch
  // armed: small against the kernels a training step is made of.
  static constexpr std::uint64_t kPollNs = 50'000;
  // And while it has nothing to act on (it learns, or the step's moves are
  // behind it): each wake-up costs the machine's other threads, the
  // launching ones among them (a futex wait and a timer; on a small virtual
  // machine 10-20 us of CPU each), and learning needs no promptness. A step
  // marker still wakes it at once, and the ring holds 32768 launches.
  static constexpr std::uint64_t kCalmPollNs = 1'000'000;
  std::uint64_t poll_ns() const;
  // How many launches ahead prefetches are armed for the launching threads,
  // and how many launches an armed one outlives its due launch. Far enough
  // for the first steps of a plan, when this thread, busy planning at the
  // step's end, falls furthest behind (at 16, training_loop_bench had single
  // runs with 5-10% of fetches on demand; at 48, at most 2.9% in 48 runs).
  static constexpr std::uint32_t kArmAhead = 48;
  static constexpr std::uint64_t kArmedGrace = 4;
  // With nothing taken for this long (and no device-clock reading pending)
  // the thread stops polling and naps until a post wakes it: an idle job
  // costs nothing, and the wake-up (a futex call) is paid once per idle spell,
  // not per launch.
  static constexpr std::uint64_t kNapAfterNs = 2'000'000;
  bool claimed() const noexcept;  // a producer has claimed a slot not yet taken
  bool may_nap(std::uint64_t now_ns) const noexcept;
  void run();
  bool take(Message* m, std::uint64_t* ns) noexcept;
  void handle(const Message& m, std::uint64_t ns);
  void handle_launch(const LaunchUses& l, std::uint64_t ns);
  void feed(const policy::Event& e, std::uint64_t ns);
  void report_demand_fetch(const DemandFetch& r);
  void report_late_fetch(const LateFetch& r);
  void hold_launch(const policy::Event& launch, std::uint64_t ns);
  void release_held_launch(std::uint64_t ns);  // into the policy, with its duration
  void act_on_launch(std::uint64_t seq);
  void read_clock();  // device durations of the launches between samples that completed
  void publish();
  void sample_densely();
  void adapt_clock(std::uint64_t steps, std::uint64_t mispredictions);
  void back_off_clock();  // no step ended for long (kUnlearnedLaunches)
  void tag(const policy::Event& e);  // what the policy learned, for the allocator's per-class stats
  std::optional<policy::BlockId> id_for(const policy::Trigger& t) const;  // the address its block starts at
  alloc::Block* block_for(const policy::Trigger& t) const;
  void act(std::span<const policy::Trigger> triggers, policy::Action action);
  void arm_ahead(std::uint64_t seq);
  static bool off_device(alloc::State st) noexcept {
    return st == alloc::State::Spilled || st == alloc::State::Spilling;
  }
  bool carry_out(const policy::Trigger& t);
  void retry_deferred();

  alloc::Allocator& allocator_;
  Recorder* recorder_;
  CUcontext ctx_;
  std::unique_ptr<policy::PolicyEngine> policy_;
  std::unique_ptr<Slot[]> ring_;
  // The producers' cache line: written at every post (head_), read at every
  // post (napping_, sleeping_, which this thread writes only as it naps or
  // sleeps). What this thread writes at every take lives on the next line:
  // sharing this one, it made every post miss on head_ (a third of the
  // post's samples in launch_hook_bench).
  alignas(64) std::atomic<std::uint64_t> head_{0};  // next slot to write
  std::atomic<bool> sleeping_{false};
  // Napping: asleep until woken, with no timeout. The protocol (Dekker's):
  // a producer claims its slot (head_, a sequentially consistent RMW), then
  // reads napping_ and, if set, wakes wake_; the thread sets napping_, then
  // reads wake_'s epoch, then head_ (all sequentially consistent), and
  // sleeps on that epoch. Either the thread sees the post, or the producer
  // sees napping_ and its wake comes after the epoch the thread sleeps on:
  // a post is never left unread in a napping thread's ring.
  std::atomic<bool> napping_{false};
  alignas(64) std::uint64_t tail_ = 0;  // next slot to read (this thread only)
  std::uint64_t last_taken_ns_ = 0;     // this thread only
  std::uint64_t clock_read_at_ = 0;     // the launch at which the clock was last read (this thread only)
  // Launches between two reads of the clock from act_on_launch: kEvery, and
  // doubling up to kMaxClockReadGap while the oldest sample is not done.
  std::uint64_t clock_read_gap_ = DeviceClock::kEvery;
  static constexpr std::uint64_t kMaxClockReadGap = 64;
  std::atomic<std::uint64_t> naps_{0}, taken_{0}, turns_{0};
  std::atomic<std::uint64_t> clock_not_yet_{0}, clock_samples_read_{0};  // written by this thread only
  std::atomic<bool> stopping_{false};
  // Both sleeps (the nap and the poll) end on it: posts, stop(), wake().
  WakeWord wake_;
  std::atomic<std::uint64_t> dropped_{0}, prefetches_{0}, spills_{0};
  std::atomic<std::uint64_t> demand_reports_{0}, prefetches_by_launchers_{0};
  ArmedPrefetches armed_;
  std::atomic<std::uint64_t> mispredictions_{0}, steps_learned_{0};
  std::uint64_t steps_turned_ = 0;  // steps_completed() when the granule boundaries last turned
  mutable RankedMutex learned_mu_{kRankLearnedStep, "runtime.learned_step"};
  LearnedStep learned_;  // guarded by learned_mu_

  // The launch held back until its duration is known, and the uses that came with it.
  bool held_ = false;
  policy::Event held_launch_{};
  std::uint64_t held_ns_ = 0;
  std::vector<policy::Event> held_uses_;

  DeviceClock clock_;
  std::vector<std::uint64_t> samples_;  // recorded, not yet read (oldest first)
  std::size_t samples_read_ = 0;        // of samples_
  std::uint64_t last_sample_ = UINT64_MAX;
  // The clock's period is kEvery << clock_shift_ (written by this thread,
  // read by every launch); it adapts at each step's end (adapt_clock, when
  // steps_completed() passes steps_turned_), and while none ends
  // (back_off_clock).
  std::atomic<unsigned> clock_shift_{0};
  std::vector<alloc::Allocator::ClassTag> tags_;  // tag()'s, reused (this thread only)
  std::uint64_t clock_mispredictions_ = 0;   // the planner's count at the last step's end
  bool clock_alarm_ = false;                 // a demand fetch or late prefetch since
  std::uint64_t last_launch_ = 0;            // the newest launch this thread took
  // The launch since which no step ended, no miss came and the period did
  // not change: back_off_clock counts from here.
  std::uint64_t clock_quiet_since_ = 0;
  double device_launch_ns_ = 0;         // running mean of a launch's device time; 0: none yet
  const bool acts_;
  bool failed_ = false;  // the policy threw: events are drained, nothing planned
  bool recalled_ = false;  // tiering stopped, and spilled blocks were called back
  bool told_overlong_ = false;  // the log said once that a step was too long to learn
  std::atomic<bool> inject_exception_{false};

  // Triggers that could not be carried out yet, tried again at each launch.
  struct Deferred {
    policy::Trigger trigger;
    std::uint32_t tries = 0;
  };
  static constexpr std::size_t kMaxDeferred = 256;
  static constexpr std::uint32_t kDeferredTries = 64;
  std::vector<Deferred> deferred_;
  std::size_t deferred_step_ = 0;  // steps completed and let go of when deferred_ was filled

  std::thread thread_;  // last: it starts once everything above is ready
};

}  // namespace tierrt
