// Copies and memsets. Each is work on a stream: copies between host and
// device go through the copy engine of their direction, device-to-device
// copies and memsets run on the stream's worker, as kernels would.
#include <cstring>

#include "state.h"
#include "stream.h"

using namespace simdev;

namespace {

enum class Dir { kHtoD, kDtoH, kDtoD, kInfer };

uint64_t u(const void* p) { return reinterpret_cast<uint64_t>(p); }

bool is_device_side(uint64_t p) {
  AddressSpace& m = state().memory;
  return m.in_arena(p) || m.resolve(p).kind == Resolved::kPinnedHost;
}

CopyEngine* engine_for(Dir d) {
  switch (d) {
    case Dir::kHtoD: return &state().h2d;
    case Dir::kDtoH: return &state().d2h;
    default: return nullptr;
  }
}

// The work of one copy, run on the stream's worker.
Work copy_work(uint64_t dst, uint64_t src, size_t n, Dir dir) {
  Work w;
  w.run = [=] {
    AddressSpace& m = state().memory;
    Access acc[2] = {{dst, n, true, false}, {src, n, false, false}};
    uint64_t token = 0;
    if (CUresult e = m.begin_use(acc, 2, &token)) return e;
    if (CopyEngine* engine = engine_for(dir)) engine->transfer(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
    else std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
    m.end_use(token);
    return CUDA_SUCCESS;
  };
  return w;
}

CUresult wait_for(const StreamPtr& s, uint64_t seq) {
  if (seq) s->wait(seq);
  return static_cast<CUresult>(state().sticky.load());
}

// `sync`: the call returns when the copy is done. Copies from or to pageable
// host memory behave synchronously too, as the driver's do.
CUresult copy(Context* ctx, Dir dir, uint64_t dst, uint64_t src, size_t n, CUstream h, bool per_thread, bool sync) {
  if (n == 0) return CUDA_SUCCESS;
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  bool dst_dev = is_device_side(dst), src_dev = is_device_side(src);
  if (dir == Dir::kInfer) {
    bool dst_arena = state().memory.in_arena(dst), src_arena = state().memory.in_arena(src);
    dir = src_arena && dst_arena ? Dir::kDtoD : src_arena ? Dir::kDtoH : dst_arena ? Dir::kHtoD : Dir::kDtoD;
  } else if ((dir != Dir::kDtoH && !dst_dev) || (dir != Dir::kHtoD && !src_dev)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  StreamPtr s;
  if (CUresult e = resolve_stream(h, per_thread, ctx, &s)) return e;
  bool pageable = (dir == Dir::kHtoD && !is_device_side(src)) || (dir == Dir::kDtoH && !is_device_side(dst));
  uint64_t seq = 0;
  if (CUresult e = submit(s, copy_work(dst, src, n, dir), &seq)) return e;
  return sync || pageable ? wait_for(s, seq) : CUDA_SUCCESS;
}

CUresult memset(Context* ctx, uint64_t dst, uint32_t value, unsigned elem, size_t count, CUstream h, bool per_thread) {
  if (count == 0) return CUDA_SUCCESS;
  if (!dst || dst % elem != 0 || !is_device_side(dst)) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, per_thread, ctx, &s)) return e;
  Work w;
  w.run = [=] {
    AddressSpace& m = state().memory;
    Access a{dst, count * elem, true, false};
    uint64_t token = 0;
    if (CUresult e = m.begin_use(&a, 1, &token)) return e;
    if (elem == 1) {
      std::memset(reinterpret_cast<void*>(dst), static_cast<int>(value & 0xff), count);
    } else if (elem == 2) {
      auto* p = reinterpret_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) p[i] = static_cast<uint16_t>(value);
    } else {
      auto* p = reinterpret_cast<uint32_t*>(dst);
      for (size_t i = 0; i < count; ++i) p[i] = value;
    }
    m.end_use(token);
    return CUDA_SUCCESS;
  };
  return submit(s, std::move(w));
}

}  // namespace

#define SIMDEV_COPY_SYNC(name, site, dir, dst_t, src_t, ptds)                        \
  SIMDEV_API CUresult CUDAAPI name(dst_t dst, src_t src, size_t n) {                 \
    SIMDEV_ENTER_CTX(site, CUDA_ERROR_INVALID_VALUE, ctx);                           \
    return copy(ctx, dir, u((const void*)(uintptr_t)dst), u((const void*)(uintptr_t)src), n, nullptr, ptds, true); \
  }

#define SIMDEV_COPY_ASYNC(name, site, dir, dst_t, src_t, ptsz)                       \
  SIMDEV_API CUresult CUDAAPI name(dst_t dst, src_t src, size_t n, CUstream h) {     \
    SIMDEV_ENTER_CTX(site, CUDA_ERROR_INVALID_VALUE, ctx);                           \
    return copy(ctx, dir, u((const void*)(uintptr_t)dst), u((const void*)(uintptr_t)src), n, h, ptsz, false); \
  }

SIMDEV_COPY_SYNC(cuMemcpyHtoD_v2, "cuMemcpyHtoD_v2", Dir::kHtoD, CUdeviceptr, const void*, false)
SIMDEV_COPY_SYNC(cuMemcpyHtoD_v2_ptds, "cuMemcpyHtoD_v2", Dir::kHtoD, CUdeviceptr, const void*, true)
SIMDEV_COPY_SYNC(cuMemcpyDtoH_v2, "cuMemcpyDtoH_v2", Dir::kDtoH, void*, CUdeviceptr, false)
SIMDEV_COPY_SYNC(cuMemcpyDtoH_v2_ptds, "cuMemcpyDtoH_v2", Dir::kDtoH, void*, CUdeviceptr, true)
SIMDEV_COPY_SYNC(cuMemcpyDtoD_v2, "cuMemcpyDtoD_v2", Dir::kDtoD, CUdeviceptr, CUdeviceptr, false)
SIMDEV_COPY_SYNC(cuMemcpyDtoD_v2_ptds, "cuMemcpyDtoD_v2", Dir::kDtoD, CUdeviceptr, CUdeviceptr, true)
SIMDEV_COPY_SYNC(cuMemcpy, "cuMemcpy", Dir::kInfer, CUdeviceptr, CUdeviceptr, false)
SIMDEV_COPY_SYNC(cuMemcpy_ptds, "cuMemcpy", Dir::kInfer, CUdeviceptr, CUdeviceptr, true)

SIMDEV_COPY_ASYNC(cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync_v2", Dir::kHtoD, CUdeviceptr, const void*, false)
SIMDEV_COPY_ASYNC(cuMemcpyHtoDAsync_v2_ptsz, "cuMemcpyHtoDAsync_v2", Dir::kHtoD, CUdeviceptr, const void*, true)
SIMDEV_COPY_ASYNC(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync_v2", Dir::kDtoH, void*, CUdeviceptr, false)
SIMDEV_COPY_ASYNC(cuMemcpyDtoHAsync_v2_ptsz, "cuMemcpyDtoHAsync_v2", Dir::kDtoH, void*, CUdeviceptr, true)
SIMDEV_COPY_ASYNC(cuMemcpyDtoDAsync_v2, "cuMemcpyDtoDAsync_v2", Dir::kDtoD, CUdeviceptr, CUdeviceptr, false)
SIMDEV_COPY_ASYNC(cuMemcpyDtoDAsync_v2_ptsz, "cuMemcpyDtoDAsync_v2", Dir::kDtoD, CUdeviceptr, CUdeviceptr, true)
SIMDEV_COPY_ASYNC(cuMemcpyAsync, "cuMemcpyAsync", Dir::kInfer, CUdeviceptr, CUdeviceptr, false)
SIMDEV_COPY_ASYNC(cuMemcpyAsync_ptsz, "cuMemcpyAsync", Dir::kInfer, CUdeviceptr, CUdeviceptr, true)

#define SIMDEV_MEMSET(name, site, value_t, elem, ptds)                                \
  SIMDEV_API CUresult CUDAAPI name(CUdeviceptr dst, value_t value, size_t count) {   \
    SIMDEV_ENTER_CTX(site, CUDA_ERROR_INVALID_VALUE, ctx);                           \
    return memset(ctx, dst, value, elem, count, nullptr, ptds);                      \
  }

#define SIMDEV_MEMSET_ASYNC(name, site, value_t, elem, ptsz)                                    \
  SIMDEV_API CUresult CUDAAPI name(CUdeviceptr dst, value_t value, size_t count, CUstream h) {  \
    SIMDEV_ENTER_CTX(site, CUDA_ERROR_INVALID_VALUE, ctx);                                      \
    return memset(ctx, dst, value, elem, count, h, ptsz);                                       \
  }

SIMDEV_MEMSET(cuMemsetD8_v2, "cuMemsetD8_v2", unsigned char, 1, false)
SIMDEV_MEMSET(cuMemsetD8_v2_ptds, "cuMemsetD8_v2", unsigned char, 1, true)
SIMDEV_MEMSET(cuMemsetD16_v2, "cuMemsetD16_v2", unsigned short, 2, false)
SIMDEV_MEMSET(cuMemsetD16_v2_ptds, "cuMemsetD16_v2", unsigned short, 2, true)
SIMDEV_MEMSET(cuMemsetD32_v2, "cuMemsetD32_v2", unsigned int, 4, false)
SIMDEV_MEMSET(cuMemsetD32_v2_ptds, "cuMemsetD32_v2", unsigned int, 4, true)
SIMDEV_MEMSET_ASYNC(cuMemsetD8Async, "cuMemsetD8Async", unsigned char, 1, false)
SIMDEV_MEMSET_ASYNC(cuMemsetD8Async_ptsz, "cuMemsetD8Async", unsigned char, 1, true)
SIMDEV_MEMSET_ASYNC(cuMemsetD16Async, "cuMemsetD16Async", unsigned short, 2, false)
SIMDEV_MEMSET_ASYNC(cuMemsetD16Async_ptsz, "cuMemsetD16Async", unsigned short, 2, true)
SIMDEV_MEMSET_ASYNC(cuMemsetD32Async, "cuMemsetD32Async", unsigned int, 4, false)
SIMDEV_MEMSET_ASYNC(cuMemsetD32Async_ptsz, "cuMemsetD32Async", unsigned int, 4, true)
