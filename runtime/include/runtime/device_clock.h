// Launch durations as the device sees them. The host runs ahead of the
// device (launches queue up until a synchronisation or a full queue), and
// it stalls in tierrt's own rescues, so the time between two launches on the
// host says little about how long kernels run; a plan made on host times
// moves memory at the wrong moments. Every kEvery-th launch records a timing
// event on its own stream, right after it; the policy thread reads the
// device time between consecutive samples once they completed and spreads
// it over the launches in between.
//
// A sample is an event record on the application's stream: on the launch
// path the largest cost after the launch itself. So the period adapts
// (PolicyThread): every kEvery-th launch while the planner learns or its
// plan misses (a demand fetch, a late prefetch, a misprediction), twice as
// sparse after each step without one, down to every (kEvery << kMaxShift)-th
// (not in a recorded run: the recording carries each launch's device time).
// Learning that finds no step backs off too: twice as sparse after each
// PolicyThread::kUnlearnedLaunches (doubling) launches without a step's end
// or a miss, so that a job in which no step is ever found does not pay a
// sample every kEvery-th launch for as long as it runs.
// Samples stay on multiples of kEvery, so their slots and spans are the same.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace tierrt {

class DeviceClock {
 public:
  static constexpr std::uint64_t kEvery = 8;  // a power of two
  static constexpr std::uint64_t kSlots = 512;  // samples in flight before one is recorded over

  // Creates the events in the current context; ok() is false if it could not.
  DeviceClock() noexcept;
  ~DeviceClock();
  DeviceClock(const DeviceClock&) = delete;
  DeviceClock& operator=(const DeviceClock&) = delete;

  bool ok() const noexcept { return ok_; }
  static constexpr unsigned kMaxShift = 5;
  // Whether launch `seq` is sampled at a period of kEvery << shift.
  static bool due(std::uint64_t seq, unsigned shift = 0) noexcept { return (seq & ((kEvery << shift) - 1)) == 0; }

  // Launch path, right after launch `seq` went out on `stream` (not a
  // capturing one). False when nothing was recorded.
  bool record(std::uint64_t seq, CUstream stream) noexcept;

  enum class Read : std::uint8_t { NotYet, Ready, Lost };
  // Device time between samples `a` and `b` (a < b), once `b` completed.
  // Lost: the slots were recorded over, or the driver refused.
  Read elapsed_ns(std::uint64_t a, std::uint64_t b, double* ns) const noexcept;

 private:
  CUevent& slot(std::uint64_t seq) noexcept { return events_[(seq / kEvery) % kSlots]; }
  CUevent slot(std::uint64_t seq) const noexcept { return events_[(seq / kEvery) % kSlots]; }
  CUevent events_[kSlots] = {};
  bool ok_ = false;
};

}  // namespace tierrt
