// Allocation hooks: allocations go to the engine's allocator, frees of its
// pointers return there, everything else reaches the driver untouched.
#include <cstring>

#include "preload/hooks.h"
#include "preload/hook_guard.h"

using namespace tierrt;
using namespace tierrt::preload;

namespace {

// The engine for this call, started on first use; null: pass through.
Engine* engine_for_current_context() noexcept {
  Engine* e = Engine::start();
  return e && e->on_engine_context() ? e : nullptr;
}

CUresult alloc_async(CUdeviceptr* p, size_t bytes, CUstream s) noexcept {
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Engine* e = engine_for_current_context();
  return e ? e->allocate(p, bytes, s) : CUDA_ERROR_NOT_SUPPORTED;
}

// The default memory pool of the current context's device.
bool is_default_pool(CUmemoryPool pool) noexcept {
  CUdevice dev = 0;
  CUmemoryPool def = nullptr;
  return pool && TIERRT_CU(cuCtxGetDevice, &dev) == CUDA_SUCCESS &&
         TIERRT_CU(cuDeviceGetDefaultMemPool, &def, dev) == CUDA_SUCCESS && def == pool;
}

}  // namespace

extern "C" {

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  Engine* e = engine_for_current_context();
  if (!e || !p || bytes == 0) return TIERRT_REAL(cuMemAlloc_v2, cuMemAlloc_v2)(p, bytes);
  return e->allocate(p, bytes, legacy_default());
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t width, size_t height, unsigned elem) {
  Engine* e = engine_for_current_context();
  if (!e || !p || !pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
    return TIERRT_REAL(cuMemAllocPitch_v2, cuMemAllocPitch_v2)(p, pitch, width, height, elem);
  // Rows padded to the texture alignment the driver uses for pitched memory.
  const size_t row = (width + 511) / 512 * 512;
  CUresult r = e->allocate(p, row * height, legacy_default());
  if (r == CUDA_SUCCESS) *pitch = row;
  return r;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  CUresult r;
  if (Engine* e = Engine::active(); e && e->free(p, legacy_default(), &r)) return r;
  return TIERRT_REAL(cuMemFree_v2, cuMemFree_v2)(p);
}

#define TIERRT_ALLOC_ASYNC_(name, stream_of)                                   \
  CUresult name(CUdeviceptr* p, size_t bytes, CUstream s) {                    \
    CUresult r = alloc_async(p, bytes, stream_of(s));                          \
    return r == CUDA_ERROR_NOT_SUPPORTED ? TIERRT_REAL(name, cuMemAllocAsync)(p, bytes, s) : r; \
  }
#define TIERRT_SAME_(s) (s)
TIERRT_ALLOC_ASYNC_(cuMemAllocAsync, TIERRT_SAME_)
TIERRT_ALLOC_ASYNC_(cuMemAllocAsync_ptsz, ptsz)

// Memory from a pool the application made stays in that pool (it may be
// exportable, or have its own release threshold); the device's default pool
// is what plain cuMemAllocAsync uses, so that one is tiered.
#define TIERRT_ALLOC_POOL_(name, stream_of)                                              \
  CUresult name(CUdeviceptr* p, size_t bytes, CUmemoryPool pool, CUstream s) {           \
    if (is_default_pool(pool)) {                                                         \
      CUresult r = alloc_async(p, bytes, stream_of(s));                                  \
      if (r != CUDA_ERROR_NOT_SUPPORTED) return r;                                       \
    }                                                                                    \
    return TIERRT_REAL(name, cuMemAllocFromPoolAsync)(p, bytes, pool, s);                \
  }
TIERRT_ALLOC_POOL_(cuMemAllocFromPoolAsync, TIERRT_SAME_)
TIERRT_ALLOC_POOL_(cuMemAllocFromPoolAsync_ptsz, ptsz)

#define TIERRT_FREE_ASYNC_(name, stream_of)                                      \
  CUresult name(CUdeviceptr p, CUstream s) {                                     \
    CUresult r;                                                                  \
    if (Engine* e = Engine::active(); e && e->free(p, stream_of(s), &r)) return r; \
    return TIERRT_REAL(name, cuMemFreeAsync)(p, s);                              \
  }
TIERRT_FREE_ASYNC_(cuMemFreeAsync, TIERRT_SAME_)
TIERRT_FREE_ASYNC_(cuMemFreeAsync_ptsz, ptsz)

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  Engine* e = Engine::active();
  if (e && free_bytes && total_bytes && e->settings().virtual_meminfo && e->on_engine_context()) {
    e->virtual_meminfo(free_bytes, total_bytes);
    return CUDA_SUCCESS;
  }
  return TIERRT_REAL(cuMemGetInfo_v2, cuMemGetInfo_v2)(free_bytes, total_bytes);
}

}  // extern "C"

namespace {

// Attributes of a tracked block, answered by tierrt: while a block is
// spilled its address may have nothing mapped, and its range is the block's.
bool block_attribute(Engine& e, alloc::Block* b, CUpointer_attribute attr, CUdeviceptr p, void* data) noexcept {
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = b->va; return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = b->size; return true;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data) = CU_MEMORYTYPE_DEVICE; return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = p; return true;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<unsigned*>(data) = 0; return true;
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<unsigned*>(data) = 1; return true;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = static_cast<unsigned long long>(b->va);
      return true;
    default: (void)e; return false;
  }
}

}  // namespace

extern "C" {

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  if (Engine* e = Engine::active(); e && data)
    if (alloc::Block* b = e->allocator().lookup(p); b && block_attribute(*e, b, attr, p, data)) return CUDA_SUCCESS;
  return TIERRT_REAL(cuPointerGetAttribute, cuPointerGetAttribute)(data, attr, p);
}

CUresult cuPointerGetAttributes(unsigned count, CUpointer_attribute* attrs, void** data, CUdeviceptr p) {
  CUresult r = TIERRT_REAL(cuPointerGetAttributes, cuPointerGetAttributes)(count, attrs, data, p);
  Engine* e = Engine::active();
  if (r != CUDA_SUCCESS || !e || !attrs || !data) return r;
  if (alloc::Block* b = e->allocator().lookup(p))
    for (unsigned i = 0; i < count; ++i)
      if (data[i]) block_attribute(*e, b, attrs[i], p, data[i]);
  return r;
}

}  // extern "C"
