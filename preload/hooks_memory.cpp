// Allocation hooks: allocations on the engine's context go to the engine,
// frees of its pointers return there, and pointer attributes and memory info
// are the engine's answers where it has one; everything else reaches the
// driver untouched.
#include "hooks.h"
#include "engine_dispatch.h"
#include "runtime/engine.h"

using namespace tierrt;
using namespace tierrt::preload;

namespace {

template <class Forward>
CUresult alloc_async(CUdeviceptr* p, size_t bytes, CUstream s, Forward&& forward) noexcept {
  Engine* e = Engine::for_allocation();
  if (!e || !p || bytes == 0) return forward();
  return e->allocate(p, bytes, s);
}

}  // namespace

extern "C" {

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  return alloc_async(p, bytes, legacy_default(), [&] { return TIERRT_REAL(cuMemAlloc_v2, cuMemAlloc_v2)(p, bytes); });
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t width, size_t height, unsigned elem) {
  auto forward = [&] { return TIERRT_REAL(cuMemAllocPitch_v2, cuMemAllocPitch_v2)(p, pitch, width, height, elem); };
  if (!pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16)) return forward();
  // Rows padded to the texture alignment the driver uses for pitched memory.
  const size_t row = (width + 511) / 512 * 512;
  const CUresult r = alloc_async(p, row * height, legacy_default(), forward);
  if (r == CUDA_SUCCESS) *pitch = row;
  return r;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  auto forward = [&] { return TIERRT_REAL(cuMemFree_v2, cuMemFree_v2)(p); };
  if (Engine* e = freeing_engine(p)) return e->free(p, forward);
  return forward();
}

// On a capturing stream the allocation is the driver's: a graph memory node.
#define TIERRT_ALLOC_ASYNC_(name, stream_of)                                                         \
  CUresult name(CUdeviceptr* p, size_t bytes, CUstream s) {                                          \
    auto forward = [&] { return TIERRT_REAL(name, cuMemAllocAsync)(p, bytes, s); };                  \
    Engine* e = Engine::for_allocation();                                                            \
    if (!e || !p || bytes == 0) return forward();                                                    \
    return e->allocate_async(p, bytes, stream_of(s), forward);                                       \
  }
#define TIERRT_SAME_(s) (s)
TIERRT_ALLOC_ASYNC_(cuMemAllocAsync, TIERRT_SAME_)
TIERRT_ALLOC_ASYNC_(cuMemAllocAsync_ptsz, ptsz)

#define TIERRT_ALLOC_POOL_(name, stream_of)                                                       \
  CUresult name(CUdeviceptr* p, size_t bytes, CUmemoryPool pool, CUstream s) {                    \
    Engine* e = Engine::for_allocation();                                                         \
    auto forward = [&] { return TIERRT_REAL(name, cuMemAllocFromPoolAsync)(p, bytes, pool, s); }; \
    if (!e || !p || bytes == 0 || !e->tiers_pool(pool)) return forward();                         \
    return e->allocate_async(p, bytes, stream_of(s), forward);                                    \
  }
TIERRT_ALLOC_POOL_(cuMemAllocFromPoolAsync, TIERRT_SAME_)
TIERRT_ALLOC_POOL_(cuMemAllocFromPoolAsync_ptsz, ptsz)

#define TIERRT_FREE_ASYNC_(name, stream_of)                                      \
  CUresult name(CUdeviceptr p, CUstream s) {                                     \
    auto forward = [&] { return TIERRT_REAL(name, cuMemFreeAsync)(p, s); };      \
    if (Engine* e = freeing_engine(p)) return e->free_async(p, stream_of(s), forward); \
    return forward();                                                            \
  }
TIERRT_FREE_ASYNC_(cuMemFreeAsync, TIERRT_SAME_)
TIERRT_FREE_ASYNC_(cuMemFreeAsync_ptsz, ptsz)

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  auto forward = [&] { return TIERRT_REAL(cuMemGetInfo_v2, cuMemGetInfo_v2)(free_bytes, total_bytes); };
  // Started here, not only at the first allocation: frameworks size their
  // memory pools from the first query, made before they allocate anything.
  if (Engine* e = Engine::for_allocation()) return e->mem_get_info(free_bytes, total_bytes, forward);
  return forward();
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  auto forward = [&] { return TIERRT_REAL(cuPointerGetAttribute, cuPointerGetAttribute)(data, attr, p); };
  if (Engine* e = Engine::owning(p)) return e->pointer_attribute(data, attr, p, forward);
  return forward();
}

CUresult cuPointerGetAttributes(unsigned count, CUpointer_attribute* attrs, void** data, CUdeviceptr p) {
  auto forward = [&] { return TIERRT_REAL(cuPointerGetAttributes, cuPointerGetAttributes)(count, attrs, data, p); };
  if (Engine* e = Engine::owning(p)) return e->pointer_attributes(count, attrs, data, p, forward);
  return forward();
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  auto forward = [&] { return TIERRT_REAL(cuMemGetAddressRange_v2, cuMemGetAddressRange_v2)(base, size, p); };
  if (Engine* e = Engine::owning(p)) return e->address_range(base, size, p, forward);
  return forward();
}

}  // extern "C"
