// tierrt's own driver calls that a stream capture may prohibit ("potentially
// unsafe" calls: the pinned pool's cuMemHostAlloc, cuMemHostRegister and
// their frees) are made with the calling thread in relaxed capture mode
// (cuThreadExchangeStreamCaptureMode), so that a capture the application
// has open (its own thread's in thread-local mode, any thread's in global
// mode) neither refuses them nor is invalidated by them. The thread's own
// mode comes back when the guard goes. A driver without the call changes
// nothing.
#pragma once

#include <cuda.h>

#include "driver/driver.h"

namespace tierrt::drv {

class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept
      : exchanged_(TIERRT_CU(cuThreadExchangeStreamCaptureMode, &mode_) == CUDA_SUCCESS) {}
  ~RelaxedCaptureMode() {
    if (exchanged_) (void)TIERRT_CU(cuThreadExchangeStreamCaptureMode, &mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;  // the thread's, once exchanged
  bool exchanged_;
};

}  // namespace tierrt::drv
