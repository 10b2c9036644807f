#include "runtime/capture_tracker.h"

namespace tierrt {

void CaptureTracker::begin(CUstream s, CUstreamCaptureMode mode) noexcept {
  for (Slot& slot : slots_) {
    CUstream expected = nullptr;
    if (slot.stream.compare_exchange_strong(expected, s)) {
      slot.global.store(mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
      active_.fetch_add(1);
      return;
    }
  }
  // More concurrent captures than slots: count it, so every launch is
  // treated as captured (conservative: blocks stay resident) until it ends.
  active_.fetch_add(1 << 16);
}

void CaptureTracker::end(CUstream s) noexcept {
  for (Slot& slot : slots_) {
    CUstream expected = s;
    if (slot.stream.compare_exchange_strong(expected, nullptr)) {
      active_.fetch_sub(1);
      return;
    }
  }
  if (active_.load() >= (1 << 16)) active_.fetch_sub(1 << 16);
}

bool CaptureTracker::capturing_slow(CUstream s) const noexcept {
  if (active_.load(std::memory_order_acquire) >= (1 << 16)) return true;
  bool default_stream = s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
  for (const Slot& slot : slots_) {
    CUstream c = slot.stream.load(std::memory_order_acquire);
    if (c == nullptr) continue;
    if (c == s || (default_stream && slot.global.load(std::memory_order_relaxed))) return true;
  }
  return false;
}

}  // namespace tierrt
