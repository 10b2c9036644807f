#include "copy_engine.h"

#include <thread>

namespace simdev {

void CopyEngine::occupy(size_t bytes, const std::function<void()>& move) {
  if (bytes_per_ns_ <= 0) {
    std::lock_guard lock(mu_);
    move();
    return;
  }
  // Book the engine's next free slot, then move the bytes and hold the
  // stream until the modeled transfer would have finished.
  Clock::time_point end;
  {
    std::lock_guard lock(mu_);
    Clock::time_point start = std::max(Clock::now(), busy_until_);
    end = start + std::chrono::nanoseconds(static_cast<long long>(bytes / bytes_per_ns_));
    busy_until_ = end;
  }
  move();
  // The OS oversleeps by tens of microseconds: sleep for the bulk of the
  // wait, then yield the rest away, so short modeled copies stay short.
  constexpr auto kSpin = std::chrono::microseconds(200);
  if (end - Clock::now() > kSpin) std::this_thread::sleep_until(end - kSpin);
  while (Clock::now() < end) std::this_thread::yield();
}

}  // namespace simdev
