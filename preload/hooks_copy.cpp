// Copy and memset hooks: each is the engine's access use case (the device
// ranges it touches and its stream) around the driver's own call.
#include "hooks.h"
#include "engine_dispatch.h"
#include "runtime/engine.h"

using namespace tierrt;
using namespace tierrt::preload;

namespace {

CUdeviceptr dev(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// Copies by direction: what the source holds may tell where the destination
// points (a pointer table uploaded from the host, or copied on the device).
template <class Forward>
CUresult copy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream, Forward&& forward) noexcept {
  return through_engines([&](Engine& e, auto& next) { return e.copy_unified(dst, src, n, stream, next); }, forward);
}
template <class Forward>
CUresult copy(CUdeviceptr dst, const void* src, size_t n, CUstream stream, Forward&& forward) noexcept {
  return through_engines([&](Engine& e, auto& next) { return e.copy_to_device(dst, src, n, stream, next); }, forward);
}
template <class Forward>
CUresult copy(void* dst, CUdeviceptr src, size_t n, CUstream stream, Forward&& forward) noexcept {
  return through_engines([&](Engine& e, auto& next) { return e.access({{dev(dst), n}, {src, n}}, stream, next); }, forward);
}
template <class Forward>
CUresult fill(CUdeviceptr dst, size_t n, CUstream stream, Forward&& forward) noexcept {
  return through_engines([&](Engine& e, auto& next) { return e.access({{dst, n}}, stream, next); }, forward);
}

}  // namespace

extern "C" {

#define TIERRT_COPY_SYNC_(name, proto, dst_t, src_t, stream)                                  \
  CUresult name(dst_t dst, src_t src, size_t n) {                                             \
    return copy(dst, src, n, stream(), [&] { return TIERRT_REAL(name, proto)(dst, src, n); }); \
  }
TIERRT_COPY_SYNC_(cuMemcpy, cuMemcpy, CUdeviceptr, CUdeviceptr, legacy_default)
TIERRT_COPY_SYNC_(cuMemcpy_ptds, cuMemcpy, CUdeviceptr, CUdeviceptr, per_thread_default)
TIERRT_COPY_SYNC_(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2, CUdeviceptr, const void*, legacy_default)
TIERRT_COPY_SYNC_(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2, CUdeviceptr, const void*, per_thread_default)
TIERRT_COPY_SYNC_(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2, void*, CUdeviceptr, legacy_default)
TIERRT_COPY_SYNC_(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2, void*, CUdeviceptr, per_thread_default)
TIERRT_COPY_SYNC_(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2, CUdeviceptr, CUdeviceptr, legacy_default)
TIERRT_COPY_SYNC_(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2, CUdeviceptr, CUdeviceptr, per_thread_default)

#define TIERRT_SAME_(s) (s)
#define TIERRT_COPY_ASYNC_(name, proto, dst_t, src_t, stream_of)                               \
  CUresult name(dst_t dst, src_t src, size_t n, CUstream s) {                                  \
    return copy(dst, src, n, stream_of(s), [&] { return TIERRT_REAL(name, proto)(dst, src, n, s); }); \
  }
TIERRT_COPY_ASYNC_(cuMemcpyAsync, cuMemcpyAsync, CUdeviceptr, CUdeviceptr, TIERRT_SAME_)
TIERRT_COPY_ASYNC_(cuMemcpyAsync_ptsz, cuMemcpyAsync, CUdeviceptr, CUdeviceptr, ptsz)
TIERRT_COPY_ASYNC_(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2, CUdeviceptr, const void*, TIERRT_SAME_)
TIERRT_COPY_ASYNC_(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2, CUdeviceptr, const void*, ptsz)
TIERRT_COPY_ASYNC_(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2, void*, CUdeviceptr, TIERRT_SAME_)
TIERRT_COPY_ASYNC_(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2, void*, CUdeviceptr, ptsz)
TIERRT_COPY_ASYNC_(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2, CUdeviceptr, CUdeviceptr, TIERRT_SAME_)
TIERRT_COPY_ASYNC_(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2, CUdeviceptr, CUdeviceptr, ptsz)

#define TIERRT_MEMSET_(name, proto, value_t, elem, stream)                                     \
  CUresult name(CUdeviceptr dst, value_t v, size_t count) {                                    \
    return fill(dst, count * (elem), stream(), [&] { return TIERRT_REAL(name, proto)(dst, v, count); }); \
  }
TIERRT_MEMSET_(cuMemsetD8_v2, cuMemsetD8_v2, unsigned char, 1, legacy_default)
TIERRT_MEMSET_(cuMemsetD8_v2_ptds, cuMemsetD8_v2, unsigned char, 1, per_thread_default)
TIERRT_MEMSET_(cuMemsetD16_v2, cuMemsetD16_v2, unsigned short, 2, legacy_default)
TIERRT_MEMSET_(cuMemsetD16_v2_ptds, cuMemsetD16_v2, unsigned short, 2, per_thread_default)
TIERRT_MEMSET_(cuMemsetD32_v2, cuMemsetD32_v2, unsigned int, 4, legacy_default)
TIERRT_MEMSET_(cuMemsetD32_v2_ptds, cuMemsetD32_v2, unsigned int, 4, per_thread_default)

#define TIERRT_MEMSET_ASYNC_(name, proto, value_t, elem, stream_of)                              \
  CUresult name(CUdeviceptr dst, value_t v, size_t count, CUstream s) {                          \
    return fill(dst, count * (elem), stream_of(s), [&] { return TIERRT_REAL(name, proto)(dst, v, count, s); }); \
  }
TIERRT_MEMSET_ASYNC_(cuMemsetD8Async, cuMemsetD8Async, unsigned char, 1, TIERRT_SAME_)
TIERRT_MEMSET_ASYNC_(cuMemsetD8Async_ptsz, cuMemsetD8Async, unsigned char, 1, ptsz)
TIERRT_MEMSET_ASYNC_(cuMemsetD16Async, cuMemsetD16Async, unsigned short, 2, TIERRT_SAME_)
TIERRT_MEMSET_ASYNC_(cuMemsetD16Async_ptsz, cuMemsetD16Async, unsigned short, 2, ptsz)
TIERRT_MEMSET_ASYNC_(cuMemsetD32Async, cuMemsetD32Async, unsigned int, 4, TIERRT_SAME_)
TIERRT_MEMSET_ASYNC_(cuMemsetD32Async_ptsz, cuMemsetD32Async, unsigned int, 4, ptsz)

}  // extern "C"
