// The primary context of device 0, current on the calling thread: what every
// allocator benchmark runs in (created once per process).
#pragma once

#include <cuda.h>

#include <cstdlib>

namespace tierrt::bench {

inline CUcontext context() {
  static CUcontext ctx = [] {
    CUcontext c = nullptr;
    CUdevice d = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&d, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS)
      std::abort();
    return c;
  }();
  cuCtxSetCurrent(ctx);
  return ctx;
}

}  // namespace tierrt::bench
