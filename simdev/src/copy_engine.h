// One copy engine per direction, shared by every stream: copies in the same
// direction run one after the other, the two directions overlap. With a
// modeled bandwidth, a copy occupies its engine for bytes / bandwidth.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>

namespace simdev {

class CopyEngine {
 public:
  void set_bandwidth(double bytes_per_ns) { bytes_per_ns_ = bytes_per_ns; }
  // Runs `move` (which writes `bytes` bytes across the link) on the engine.
  // Each engine books its own time: a copy on the other engine neither
  // waits for this one nor shares its bandwidth, as with a GPU's copy
  // engines (one per direction).
  void occupy(size_t bytes, const std::function<void()>& move);

 private:
  using Clock = std::chrono::steady_clock;
  std::mutex mu_;
  Clock::time_point busy_until_{};
  double bytes_per_ns_ = 0;  // 0: as fast as memcpy
};

}  // namespace simdev
