// The host's monotonic clock, the one place runtime/ reads it.
#pragma once

#include <chrono>
#include <cstdint>

namespace tierrt {

inline std::uint64_t steady_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace tierrt
