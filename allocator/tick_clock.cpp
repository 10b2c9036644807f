#include "tick_clock.h"

#include <cmath>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tierrt::alloc {

namespace {

// Whether the CPU's counter ticks at one rate whatever the core's frequency
// or sleep state, and what that rate is (0: measure it).
bool fixed_rate_counter(double* known_per_ns) noexcept {
  *known_per_ns = 0;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  // CPUID 0x80000007, EDX bit 8: the invariant TSC.
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u) return false;
  __cpuid(0x80000007u, a, b, c, d);
  return (d & (1u << 8)) != 0;
#elif defined(__aarch64__)
  std::uint64_t hz;
  asm volatile("mrs %0, cntfrq_el0" : "=r"(hz));
  if (hz == 0) return false;
  *known_per_ns = static_cast<double>(hz) / 1e9;
  return true;
#else
  return false;
#endif
}

}  // namespace

void TickClock::calibrate(bool allow_counter, std::uint64_t spin_ns) noexcept {
  counter_ = false;
  ticks_per_ns_ = 1.0;
  double known = 0;
  if (!allow_counter || !fixed_rate_counter(&known)) return;
  if (known <= 0) known = measure_counter_rate(steady_ns, read_counter, spin_ns);
  if (!std::isfinite(known) || known <= 0) return;
  ticks_per_ns_ = known;
  counter_ = true;
}

std::uint64_t TickClock::ticks_in(std::uint64_t ns) const noexcept {
  if (ns == UINT64_MAX) return UINT64_MAX;
  const double t = static_cast<double>(ns) * ticks_per_ns_;
  return t >= 1.8e19 ? UINT64_MAX : static_cast<std::uint64_t>(t);
}

}  // namespace tierrt::alloc
