// A cheap monotonic clock for the lazy-use window (use_tracker.h), which is
// read at every lazy launch: the CPU's own counter where it runs at a fixed
// rate (x86's invariant TSC, aarch64's generic timer), else steady_clock.
// Under a paravirtual clocksource (kvm-clock) clock_gettime cost 56-60 ns a
// read on the machine this was measured on, rdtsc 25-29 ns: the launch path's
// costliest single step.
//
// The window only bounds how long an open use event gathers uses, and its
// length never decides whether a wait is long enough, so its clock need not
// be exact: counters that disagree across CPUs move the window by at most
// their skew, and a launch that reads a time before the last record (a
// wrapped, huge difference) records the event at once.
#pragma once

#include <cstdint>

#include "steady_clock.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace tierrt::alloc {

class TickClock {
 public:
  // steady_clock until calibrate() found a counter.
  TickClock() = default;
  // Uses the CPU's counter where the CPU says it runs at a fixed rate, its
  // rate measured against steady_clock over `spin_ns` (x86; aarch64 reads
  // it from the counter's frequency register). `allow_counter` false keeps
  // steady_clock.
  void calibrate(bool allow_counter = true, std::uint64_t spin_ns = 500'000) noexcept;

  std::uint64_t now() const noexcept { return counter_ ? read_counter() : steady_ns(); }
  // Ticks in `ns` nanoseconds (saturating: UINT64_MAX stays "never").
  std::uint64_t ticks_in(std::uint64_t ns) const noexcept;
  bool uses_counter() const noexcept { return counter_; }
  double ticks_per_ns() const noexcept { return ticks_per_ns_; }

  static std::uint64_t read_counter() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#elif defined(__aarch64__)
    std::uint64_t v;
    asm volatile("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
    return steady_ns();
#endif
  }

 private:
  bool counter_ = false;
  double ticks_per_ns_ = 1.0;
};

// The counter's rate (ticks per ns) against the host's clock over at least
// `spin_ns`, from `steady()` (ns) and `counter()`. Each end of the span is
// one reading of both clocks: the counter read between two host-clock
// reads at most kPairedWithinNs apart. A thread preempted between the two
// clocks' reads would pair one clock's time with the other's much later one
// and get the rate too low by the time it lost: the window would be that
// much shorter in real time (the likeliest reading of a CI run where a
// 120 ms sleep passed four windows meant to be 100 ms each).
// 0 where no such reading could be made.
inline constexpr std::uint64_t kPairedWithinNs = 5'000;
template <class Steady, class Counter>
double measure_counter_rate(Steady&& steady, Counter&& counter, std::uint64_t spin_ns) noexcept {
  auto paired = [&](std::uint64_t* ns, std::uint64_t* ticks) {
    for (int tries = 0; tries < 1000; ++tries) {
      const std::uint64_t before = steady();
      const std::uint64_t c = counter();
      const std::uint64_t after = steady();
      if (after >= before && after - before <= kPairedWithinNs) {
        *ns = before + (after - before) / 2;
        *ticks = c;
        return true;
      }
    }
    return false;
  };
  std::uint64_t ns0 = 0, c0 = 0, ns1 = 0, c1 = 0;
  if (!paired(&ns0, &c0)) return 0;
  while (steady() - ns0 < spin_ns) {
  }
  if (!paired(&ns1, &c1) || c1 <= c0 || ns1 <= ns0) return 0;
  return static_cast<double>(c1 - c0) / static_cast<double>(ns1 - ns0);
}

}  // namespace tierrt::alloc
