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
  const drv::Table& t = drv::table();
  CUdevice current = -1;
  if (t.cuCtxGetDevice && t.cuCtxGetDevice(&current) == CUDA_SUCCESS && current == device) return true;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  return t.cuDeviceGet(&dev, device) == CUDA_SUCCESS && t.cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS &&
         t.cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
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
  return drv::table().cuMemAllocAsync(&p, static_cast<size_t>(size), s) == CUDA_SUCCESS ? reinterpret_cast<void*>(p)
                                                                                        : nullptr;
}

void tierrt_torch_free(void* ptr, ssize_t size, int device, void* stream) {
  (void)size;
  (void)device;
  if (!ptr) return;
  CUstream s = static_cast<CUstream>(stream);
  CUresult r;
  if (Engine* e = Engine::active(); e && e->free(reinterpret_cast<CUdeviceptr>(ptr), s, &r)) return;
  drv::table().cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(ptr), s);
}

}  // extern "C"
