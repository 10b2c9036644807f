#include "allocator/capture_gate.h"

#include <cassert>
#include <thread>

#include "driver/driver.h"

namespace tierrt::alloc {

CaptureGate& CaptureGate::process() noexcept {
  static CaptureGate* gate = new CaptureGate;  // never destroyed: probes run until exit
  return *gate;
}

void CaptureGate::enter_begin() noexcept {
  beginning_.fetch_add(1, std::memory_order_seq_cst);
  while (probes_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

void CaptureGate::leave_begin() noexcept {
  [[maybe_unused]] const std::int64_t was = beginning_.fetch_sub(1, std::memory_order_seq_cst);
  assert(was > 0);
}

void CaptureGate::capture_closed() noexcept {
  // Never below zero: a capture begun before the hooks were in place was
  // never counted, yet its end is seen.
  std::int64_t n = open_.load(std::memory_order_relaxed);
  while (n > 0 && !open_.compare_exchange_weak(n, n - 1, std::memory_order_seq_cst)) {
  }
}

bool CaptureGate::captures(CUstream s) noexcept {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return TIERRT_CU(cuStreamIsCapturing, s, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void CaptureGate::enter_probe() noexcept {
  for (;;) {
    probes_.fetch_add(1, std::memory_order_seq_cst);
    if (beginning_.load(std::memory_order_seq_cst) == 0) return;
    // Withdrawn, so that the beginning capture (which waits for probes) goes on.
    probes_.fetch_sub(1, std::memory_order_seq_cst);
    while (beginning_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }
}

}  // namespace tierrt::alloc
