// Which streams are capturing a CUDA graph right now, as seen through the
// capture hooks, so a launch can tell without asking the driver.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

namespace tierrt {

class CaptureTracker {
 public:
  void begin(CUstream s, CUstreamCaptureMode mode) noexcept;
  void end(CUstream s) noexcept;
  // True when work on `s` is being captured, or when a global-mode capture is
  // active and `s` is a default stream (which such a capture forbids anyway).
  bool capturing(CUstream s) const noexcept {
    if (active_.load(std::memory_order_acquire) == 0) return false;
    return capturing_slow(s);
  }

 private:
  bool capturing_slow(CUstream s) const noexcept;
  static constexpr int kSlots = 64;
  struct Slot {
    std::atomic<CUstream> stream{nullptr};
    std::atomic<int> global{0};
  };
  Slot slots_[kSlots];
  std::atomic<int> active_{0};
};

}  // namespace tierrt
