// Host time for the allocator's reports (how late a fetch was).
#pragma once

#include <chrono>
#include <cstdint>

namespace tierrt::alloc {

inline std::uint64_t steady_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace tierrt::alloc
