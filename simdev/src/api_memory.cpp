// cuMemAlloc and friends, stream-ordered allocation, pinned host memory.
#include "capture.h"
#include "state.h"
#include "stream.h"

using namespace simdev;

namespace {

// Each device's one memory pool; stream-ordered allocations come from it.
struct DefaultPool {
} g_default_pool[kMaxDevices];

CUmemoryPool default_pool(CUdevice dev) { return reinterpret_cast<CUmemoryPool>(&g_default_pool[dev]); }
bool is_default_pool(CUmemoryPool pool, CUdevice dev) { return pool == default_pool(dev); }

// cuMemAlloc memory belongs to `ctx`: on its device, and accessible to the
// kernels of peers that enabled access to it.
CUresult alloc_in(Context* ctx, uint64_t bytes, uint64_t* p) {
  State& s = state();
  std::lock_guard lock(s.ctx_mu);  // peer access does not change meanwhile
  return s.memory.mem_alloc(bytes, ctx->device, ctx, memalloc_access_mask_locked(ctx), p);
}

CUresult alloc_async(CUdeviceptr* dptr, size_t bytes, CUstream h, bool ptsz, Context* ctx,
                     CUmemoryPool pool = nullptr) {
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  // The stream's device's pool, unless one is named.
  Context* owner = s->context();
  if (pool && !is_default_pool(pool, owner->device)) return CUDA_ERROR_INVALID_VALUE;
  // Memory handed out now is also valid at the stream's point: allocating
  // early is one of the orders the driver may choose. Memory this stream
  // frees before that point is the pool's to reuse, so when the device is
  // full, let the stream's pending frees happen and try again.
  uint64_t p = 0;
  CUresult e = alloc_in(owner, bytes, &p);
  if (e == CUDA_ERROR_OUT_OF_MEMORY) {
    s->wait(s->submitted());
    e = alloc_in(owner, bytes, &p);
  }
  if (e) return e;
  // In a capture the allocation becomes the graph's allocation node: the
  // memory is the graph's from now on, so its nodes may name it.
  CUresult captured = CUDA_SUCCESS;
  if (capture_alloc(s, p, &captured) && captured) {
    state().memory.mem_free(p);
    return captured;
  }
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult free_async(CUdeviceptr dptr, CUstream h, bool ptsz, Context* ctx) {
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  Resolved r = state().memory.resolve(dptr);
  if (r.kind != Resolved::kDeviceMapped || r.range_base != dptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult captured = CUDA_SUCCESS;
  if (capture_free(s, dptr, &captured)) return captured;
  Work w;
  w.run = [dptr] { return state().memory.mem_free(dptr); };
  return submit(s, std::move(w));
}

}  // namespace

SIMDEV_API CUresult CUDAAPI cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  SIMDEV_ENTER_CTX("cuMemGetInfo_v2", CUDA_ERROR_INVALID_CONTEXT, ctx);
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  const AddressSpace& m = state().memory;
  uint64_t used = m.device_used(ctx->device);
  *total_bytes = m.device_capacity();
  *free_bytes = used < m.device_capacity() ? m.device_capacity() - used : 0;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  SIMDEV_ENTER_CTX("cuMemAlloc_v2", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  if (CUresult e = refuse_unsafe_call()) return e;
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t p = 0;
  if (CUresult e = alloc_in(ctx, bytes, &p)) return e;
  *dptr = p;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                               unsigned int element_bytes) {
  SIMDEV_ENTER_CTX("cuMemAllocPitch_v2", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  if (CUresult e = refuse_unsafe_call()) return e;
  if (!dptr || !pitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16) return CUDA_ERROR_INVALID_VALUE;
  size_t p = round_up(width, 512);  // the texture pitch alignment this device reports
  uint64_t base = 0;
  if (CUresult e = alloc_in(ctx, p * height, &base)) return e;
  *dptr = base;
  *pitch = p;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  SIMDEV_ENTER_CTX("cuMemFree_v2", CUDA_ERROR_INVALID_VALUE, ctx);
  if (CUresult e = refuse_unsafe_call()) return e;
  if (dptr == 0) return CUDA_SUCCESS;
  Resolved r = state().memory.resolve(dptr);
  if (r.kind != Resolved::kDeviceMapped || r.range_base != dptr) return CUDA_ERROR_INVALID_VALUE;
  // Like the driver, freeing waits for the device to go idle first.
  if (CUresult e = synchronize_context(ctx)) return e;
  return state().memory.mem_free(dptr);
}

SIMDEV_API CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  SIMDEV_ENTER_CTX("cuMemGetAddressRange_v2", CUDA_ERROR_NOT_FOUND, ctx);
  (void)ctx;
  Resolved r = state().memory.resolve(dptr);
  if (r.kind != Resolved::kDeviceMapped) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = r.range_base;
  if (size) *size = r.range_size;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream h) {
  SIMDEV_ENTER_CTX("cuMemAllocAsync", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  return alloc_async(dptr, bytes, h, false, ctx);
}

SIMDEV_API CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream h) {
  SIMDEV_ENTER_CTX("cuMemAllocAsync", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  return alloc_async(dptr, bytes, h, true, ctx);
}

SIMDEV_API CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream h) {
  SIMDEV_ENTER_CTX("cuMemAllocFromPoolAsync", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(dptr, bytes, h, false, ctx, pool);
}

SIMDEV_API CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream h) {
  SIMDEV_ENTER_CTX("cuMemAllocFromPoolAsync", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(dptr, bytes, h, true, ctx, pool);
}

SIMDEV_API CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream h) {
  SIMDEV_ENTER_CTX("cuMemFreeAsync", CUDA_ERROR_INVALID_VALUE, ctx);
  return free_async(dptr, h, false, ctx);
}

SIMDEV_API CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream h) {
  SIMDEV_ENTER_CTX("cuMemFreeAsync", CUDA_ERROR_INVALID_VALUE, ctx);
  return free_async(dptr, h, true, ctx);
}

SIMDEV_API CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  SIMDEV_ENTER("cuDeviceGetDefaultMemPool", CUDA_ERROR_INVALID_DEVICE);
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = default_pool(dev);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  SIMDEV_ENTER("cuDeviceGetMemPool", CUDA_ERROR_INVALID_DEVICE);
  return cuDeviceGetDefaultMemPool(pool, dev);
}

// ---- pinned host memory ----

SIMDEV_API CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuMemHostAlloc", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  if (CUresult e = refuse_unsafe_call()) return e;
  (void)ctx;
  constexpr unsigned kKnown = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (!pp || bytes == 0 || (flags & ~kKnown)) return CUDA_ERROR_INVALID_VALUE;
  return state().memory.host_alloc(bytes, flags, pp);
}

SIMDEV_API CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytes) { return cuMemHostAlloc(pp, bytes, 0); }

SIMDEV_API CUresult CUDAAPI cuMemFreeHost(void* p) {
  SIMDEV_ENTER_CTX("cuMemFreeHost", CUDA_ERROR_INVALID_VALUE, ctx);
  if (CUresult e = refuse_unsafe_call()) return e;
  if (state().memory.resolve(reinterpret_cast<uint64_t>(p)).kind != Resolved::kPinnedHost)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = synchronize_context(ctx)) return e;
  return state().memory.host_free(p);
}

SIMDEV_API CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuMemHostRegister_v2", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  if (CUresult e = refuse_unsafe_call()) return e;
  (void)ctx;
  constexpr unsigned kKnown = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                              CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if (flags & ~kKnown) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CU_MEMHOSTREGISTER_IOMEMORY) return CUDA_ERROR_NOT_SUPPORTED;
  return state().memory.host_register(p, bytes, flags);
}

SIMDEV_API CUresult CUDAAPI cuMemHostRegister(void* p, size_t bytes, unsigned int flags) {
  return cuMemHostRegister_v2(p, bytes, flags);
}

SIMDEV_API CUresult CUDAAPI cuMemHostUnregister(void* p) {
  SIMDEV_ENTER_CTX("cuMemHostUnregister", CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, ctx);
  if (CUresult e = refuse_unsafe_call()) return e;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = synchronize_context(ctx)) return e;
  return state().memory.host_unregister(p);
}

SIMDEV_API CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* dptr, void* p, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuMemHostGetDevicePointer_v2", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)ctx;
  if (!dptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (state().memory.resolve(reinterpret_cast<uint64_t>(p)).kind != Resolved::kPinnedHost)
    return CUDA_ERROR_INVALID_VALUE;
  *dptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: same address
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuMemHostGetFlags(unsigned int* flags, void* p) {
  SIMDEV_ENTER_CTX("cuMemHostGetFlags", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)ctx;
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  if (state().memory.resolve(reinterpret_cast<uint64_t>(p)).kind != Resolved::kPinnedHost)
    return CUDA_ERROR_INVALID_VALUE;
  *flags = CU_MEMHOSTALLOC_DEVICEMAP;
  return CUDA_SUCCESS;
}

// ---- simdev-only introspection (simdev.h) ----

SIMDEV_API unsigned long long simdev_device_bytes_in_use(void) { return state().memory.device_used_total(); }
SIMDEV_API unsigned long long simdev_host_bytes_in_use(void) { return state().memory.host_used(); }
