// A byte budget: a target, what is reserved against it, and the peak. A
// reservation may pass the target (force_reserve) when the caller decided
// that it must: the device budget is a target, never a reason to fail.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace tierrt::alloc {

class Budget {
 public:
  explicit Budget(std::uint64_t limit = UINT64_MAX) : limit_(limit) {}

  void set_limit(std::uint64_t limit) noexcept { limit_.store(limit, std::memory_order_relaxed); }
  std::uint64_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
  std::uint64_t used() const noexcept { return used_.load(std::memory_order_relaxed); }
  std::uint64_t peak() const noexcept { return peak_.load(std::memory_order_relaxed); }
  std::uint64_t available() const noexcept {
    const auto l = limit(), u = used();
    return u >= l ? 0 : l - u;
  }

  // Reserves n bytes if they fit under the limit.
  bool try_reserve(std::uint64_t n) noexcept {
    std::uint64_t u = used_.load(std::memory_order_relaxed);
    do {
      if (n > limit() || u > limit() - n) return false;
    } while (!used_.compare_exchange_weak(u, u + n, std::memory_order_relaxed));
    bump_peak(u + n);
    return true;
  }
  // Reserves n bytes whether or not they fit; true when that passed the
  // limit (counted in over_limit()).
  bool force_reserve(std::uint64_t n) noexcept {
    const std::uint64_t u = used_.fetch_add(n, std::memory_order_relaxed) + n;
    bump_peak(u);
    if (u <= limit()) return false;
    over_limit_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  void release(std::uint64_t n) noexcept { used_.fetch_sub(n, std::memory_order_relaxed); }
  // Reservations that passed the limit.
  std::uint64_t over_limit() const noexcept { return over_limit_.load(std::memory_order_relaxed); }

 private:
  void bump_peak(std::uint64_t v) noexcept {
    std::uint64_t p = peak_.load(std::memory_order_relaxed);
    while (v > p && !peak_.compare_exchange_weak(p, v, std::memory_order_relaxed)) {}
  }
  std::atomic<std::uint64_t> limit_;
  std::atomic<std::uint64_t> used_{0};
  std::atomic<std::uint64_t> peak_{0};
  std::atomic<std::uint64_t> over_limit_{0};
};

}  // namespace tierrt::alloc
