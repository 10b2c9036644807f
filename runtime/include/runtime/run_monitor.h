// What the run looked like, for the report and the memory timeline: one row
// per step (the last kMaxSteps kept) and the memory over time, sampled by a
// thread of its own at a low rate (never on the launch path). The same
// thread writes the outputs when SIGTERM or SIGINT arrives: the handler only
// writes a byte to a pipe this thread watches.
#pragma once

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "allocator/ranked_mutex.h"
#include "runtime/lock_rank.h"

namespace tierrt {

// Counters as they stand at one moment; cumulative since the run began.
struct RunCounters {
  std::uint64_t ns = 0;  // since the monitor started (the monitor sets it)
  std::uint64_t device_used = 0, host_used = 0, device_budget = 0;
  std::uint64_t class_bytes[8] = {};  // live bytes: 0 unclassified, else 1 + the lifetime class
  std::uint64_t bytes_spilled = 0, bytes_fetched = 0;
  std::uint64_t demand_fetches = 0, planned_prefetches = 0, late_prefetches = 0, stall_ns = 0;
  std::uint64_t steps_detected = 0;  // steps the planner found (without markers)
};

// One step, from one boundary to the next.
struct StepRow {
  std::uint64_t index = 0;  // of the step's end: steps marked or found so far, less one
  std::uint64_t steps = 1;  // steps the row covers: the planner may find several at once
  std::uint64_t start_ns = 0, ns = 0;
  std::uint64_t stall_ns = 0;  // launches waited this long for prefetches still under way
  std::uint64_t bytes_spilled = 0, bytes_fetched = 0;
  std::uint64_t demand_fetches = 0, planned_prefetches = 0, late_prefetches = 0;
};

// One point of the memory timeline.
struct TimelinePoint {
  std::uint64_t ns = 0;
  std::uint64_t device_used = 0, host_used = 0;
  std::uint64_t class_bytes[8] = {};
  std::uint64_t spilled = 0, fetched = 0;  // bytes moved since the point before
  std::uint32_t steps = 0;                 // step boundaries since the point before
};

class RunMonitor {
 public:
  using ReadCounters = RunCounters (*)(void* context) noexcept;
  using WriteOutputs = void (*)(void* context) noexcept;
  // Starts the sampler thread. `read` gives the counters (from any thread
  // but the launch path); `write` writes every output, from this thread on
  // SIGTERM / SIGINT, after which the signal's previous disposition acts.
  RunMonitor(ReadCounters read, WriteOutputs write, void* context);
  ~RunMonitor();
  RunMonitor(const RunMonitor&) = delete;
  RunMonitor& operator=(const RunMonitor&) = delete;

  // A step boundary the application marked (tierrt_mark_step). Once a step
  // was marked, steps the planner finds are not counted.
  void step_marked() noexcept;

  static constexpr std::size_t kMaxSteps = 1000;
  static constexpr std::size_t kMaxPoints = 4096;
  static constexpr std::uint64_t kFirstPeriodNs = 2'000'000;

  struct Snapshot {
    std::vector<StepRow> steps;          // oldest first
    std::uint64_t steps_dropped = 0;     // older rows no longer kept
    std::vector<TimelinePoint> points;   // oldest first
    std::uint64_t period_ns = 0;         // between points, as now (doubles at each downsampling)
    std::uint32_t downsamplings = 0;
    std::uint64_t device_budget = 0;
  };
  // Takes a point of the timeline now, as the sampler does at its period.
  void sample_now() noexcept;
  // As of now: the counters are read once more for a last point.
  Snapshot snapshot();

 private:
  RunCounters read_now() noexcept;
  void run() noexcept;
  void tick() noexcept;
  void close_step(const RunCounters& now, std::uint64_t index, std::uint64_t steps) noexcept;  // under mu_
  void add_point(const RunCounters& now) noexcept;                        // under mu_
  void on_signal(int signo) noexcept;
  static void handler(int signo, siginfo_t* info, void* uctx) noexcept;
  void install_handlers() noexcept;

  ReadCounters read_;
  WriteOutputs write_;
  void* context_;
  std::uint64_t start_ns_;
  mutable RankedMutex mu_{kRankRunMonitor, "runtime.run_monitor"};
  std::deque<StepRow> steps_;
  std::uint64_t steps_dropped_ = 0, steps_closed_ = 0;
  RunCounters run_start_{};       // counters when the monitor started
  RunCounters step_start_{};      // counters at the last boundary
  RunCounters point_before_{};    // counters at the last point
  std::uint32_t boundaries_since_point_ = 0;
  bool marked_ = false;
  std::vector<TimelinePoint> points_;
  std::uint64_t period_ns_ = kFirstPeriodNs, next_point_ns_ = 0;
  std::uint32_t downsamplings_ = 0;
  std::uint64_t device_budget_ = 0;
  int pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace tierrt
