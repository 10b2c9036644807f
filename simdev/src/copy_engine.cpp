#include "copy_engine.h"

#include <cstring>
#include <thread>

namespace simdev {

void CopyEngine::transfer(void* dst, const void* src, size_t bytes) {
  if (bytes_per_ns_ <= 0) {
    std::lock_guard lock(mu_);
    std::memmove(dst, src, bytes);
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
  std::memmove(dst, src, bytes);
  std::this_thread::sleep_until(end);
}

}  // namespace simdev
