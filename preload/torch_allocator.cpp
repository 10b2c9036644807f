// PyTorch's pluggable-allocator entry points:
//   torch.cuda.memory.CUDAPluggableAllocator("libtierrt.so",
//       "tierrt_torch_malloc", "tierrt_torch_free")
// and, for Tensor.record_stream, tierrt_torch_record_stream through the C++
// allocator's set_record_stream_fn (void(void* ptr, cudaStream_t stream)).
// Stream-ordered: memory freed on a stream is reused only as that stream's
// work allows, which is what PyTorch's caching allocator assumes of itself;
// memory recorded on another stream also waits for that stream's work.
// With tierrt off, or on another device than the engine's, malloc and free
// stand in for cuMemAllocAsync / cuMemFreeAsync and forward to them.
#include <sys/types.h>

#include "hooks.h"
#include "engine_dispatch.h"
#include "runtime/engine.h"

using namespace tierrt;
using namespace tierrt::preload;

extern "C" {

void* tierrt_torch_malloc(ssize_t size, int device, void* stream) {
  if (size <= 0 || !Engine::make_device_current(device)) return nullptr;
  const auto bytes = static_cast<size_t>(size);
  CUstream s = static_cast<CUstream>(stream);
  CUdeviceptr p = 0;
  Engine* e = Engine::for_allocation();
  const CUresult r = e ? e->allocate(&p, bytes, s) : TIERRT_REAL(cuMemAllocAsync, cuMemAllocAsync)(&p, bytes, s);
  return r == CUDA_SUCCESS ? reinterpret_cast<void*>(p) : nullptr;
}

void tierrt_torch_free(void* ptr, ssize_t size, int device, void* stream) {
  (void)size;
  (void)device;
  if (!ptr) return;
  const auto p = reinterpret_cast<CUdeviceptr>(ptr);
  CUstream s = static_cast<CUstream>(stream);
  auto forward = [&] { return TIERRT_REAL(cuMemFreeAsync, cuMemFreeAsync)(p, s); };
  // PyTorch's free returns nothing: a failure here has no one to report to.
  if (Engine* e = freeing_engine(p)) (void)e->free_async(p, s, forward);
  else (void)forward();
}

// Work enqueued on `stream` so far uses the allocation at `ptr`: a free
// waits for it before the memory is handed out again. PyTorch's record-stream
// call returns nothing either.
void tierrt_torch_record_stream(void* ptr, void* stream) {
  Engine* e = ptr ? Engine::owning(reinterpret_cast<CUdeviceptr>(ptr)) : nullptr;
  if (!e) return;
  const AddressRange range{reinterpret_cast<CUdeviceptr>(ptr), 1};
  (void)e->access({range}, static_cast<CUstream>(stream), [] { return CUDA_SUCCESS; });
}

}  // extern "C"
