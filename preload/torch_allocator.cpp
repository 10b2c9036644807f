// PyTorch's pluggable-allocator entry points:
//   torch.cuda.memory.CUDAPluggableAllocator("libtierrt.so",
//       "tierrt_torch_malloc", "tierrt_torch_free")
// Stream-ordered: memory freed on a stream is reused only as that stream's
// work allows, which is what PyTorch's caching allocator assumes of itself.
#include <sys/types.h>

#include "driver/driver.h"
#include "runtime/engine.h"

using namespace tierrt;

namespace {

// PyTorch calls with the device's context current; make sure of it.
bool on_device(int device) noexcept {
  CUdevice current = -1;
  if (TIERRT_CU(cuCtxGetDevice, &current) == CUDA_SUCCESS && current == device) return true;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  return TIERRT_CU(cuDeviceGet, &dev, device) == CUDA_SUCCESS &&
         TIERRT_CU(cuDevicePrimaryCtxRetain, &ctx, dev) == CUDA_SUCCESS && TIERRT_CU(cuCtxSetCurrent, ctx) == CUDA_SUCCESS;
}

}  // namespace

extern "C" {

void* tierrt_torch_malloc(ssize_t size, int device, void* stream) {
  if (size <= 0 || !on_device(device)) return nullptr;
  CUstream s = static_cast<CUstream>(stream);
  CUdeviceptr p = 0;
  Engine* e = Engine::start();
  if (e && e->on_engine_context()) return e->allocate(&p, static_cast<size_t>(size), s) == CUDA_SUCCESS
                                               ? reinterpret_cast<void*>(p)
                                               : nullptr;
  // tierrt is off (or this is another device): still be an allocator.
  return TIERRT_CU(cuMemAllocAsync, &p, static_cast<size_t>(size), s) == CUDA_SUCCESS ? reinterpret_cast<void*>(p)
                                                                                      : nullptr;
}

void tierrt_torch_free(void* ptr, ssize_t size, int device, void* stream) {
  (void)size;
  (void)device;
  if (!ptr) return;
  CUstream s = static_cast<CUstream>(stream);
  CUresult r;
  if (Engine* e = Engine::active(); e && e->free(reinterpret_cast<CUdeviceptr>(ptr), s, &r)) return;
  // PyTorch's free returns nothing: a failure here has no one to report to.
  (void)TIERRT_CU(cuMemFreeAsync, reinterpret_cast<CUdeviceptr>(ptr), s);
}

}  // extern "C"
