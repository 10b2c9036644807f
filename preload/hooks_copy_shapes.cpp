// Copies and memsets described by shapes (2D and 3D, peer, batches) and
// stream memory operations: each is the engine's access use case over the
// device ranges it touches (runtime/copy_shapes.h) around the driver's own
// call.
#include "hooks.h"
#include "engine_dispatch.h"
#include "runtime/engine.h"

using namespace tierrt;
using namespace tierrt::preload;

namespace {

template <class RangeAt, class Forward>
CUresult touch(std::size_t count, RangeAt&& range_at, CUstream stream, Forward&& forward) noexcept {
  return through_engines([&](Engine& e, auto& next) { return e.access_each(count, range_at, stream, next); }, forward);
}

// A copy described by one descriptor: its destination and its source.
template <class Descriptor, class Forward>
CUresult described(const Descriptor* c, CUstream stream, Forward&& forward) noexcept {
  if (!c) return forward();
  return touch(2, [c](std::size_t i) { return i ? copy_source(*c) : copy_destination(*c); }, stream, forward);
}

template <class Forward>
CUresult peer(CUdeviceptr dst, CUdeviceptr src, std::size_t n, CUstream stream, Forward&& forward) noexcept {
  return touch(2, [&](std::size_t i) { return contiguous(i ? src : dst, n); }, stream, forward);
}

template <class Forward>
CUresult one_word(CUdeviceptr addr, std::size_t bytes, CUstream stream, Forward&& forward) noexcept {
  return touch(1, [&](std::size_t) { return contiguous(addr, bytes); }, stream, forward);
}

}  // namespace

extern "C" {

#define TIERRT_SAME_(s) (s)

#define TIERRT_DESCRIBED_SYNC_(name, proto, descriptor, stream)                            \
  CUresult name(const descriptor* c) {                                                     \
    return described(c, stream(), [&] { return TIERRT_REAL(name, proto)(c); });           \
  }
TIERRT_DESCRIBED_SYNC_(cuMemcpy2D_v2, cuMemcpy2D_v2, CUDA_MEMCPY2D, legacy_default)
TIERRT_DESCRIBED_SYNC_(cuMemcpy2D_v2_ptds, cuMemcpy2D_v2, CUDA_MEMCPY2D, per_thread_default)
TIERRT_DESCRIBED_SYNC_(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2, CUDA_MEMCPY2D, legacy_default)
TIERRT_DESCRIBED_SYNC_(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned_v2, CUDA_MEMCPY2D, per_thread_default)
TIERRT_DESCRIBED_SYNC_(cuMemcpy3D_v2, cuMemcpy3D_v2, CUDA_MEMCPY3D, legacy_default)
TIERRT_DESCRIBED_SYNC_(cuMemcpy3D_v2_ptds, cuMemcpy3D_v2, CUDA_MEMCPY3D, per_thread_default)
TIERRT_DESCRIBED_SYNC_(cuMemcpy3DPeer, cuMemcpy3DPeer, CUDA_MEMCPY3D_PEER, legacy_default)
TIERRT_DESCRIBED_SYNC_(cuMemcpy3DPeer_ptds, cuMemcpy3DPeer, CUDA_MEMCPY3D_PEER, per_thread_default)

#define TIERRT_DESCRIBED_ASYNC_(name, proto, descriptor, stream_of)                          \
  CUresult name(const descriptor* c, CUstream s) {                                           \
    return described(c, stream_of(s), [&] { return TIERRT_REAL(name, proto)(c, s); });      \
  }
TIERRT_DESCRIBED_ASYNC_(cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2, CUDA_MEMCPY2D, TIERRT_SAME_)
TIERRT_DESCRIBED_ASYNC_(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync_v2, CUDA_MEMCPY2D, ptsz)
TIERRT_DESCRIBED_ASYNC_(cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2, CUDA_MEMCPY3D, TIERRT_SAME_)
TIERRT_DESCRIBED_ASYNC_(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync_v2, CUDA_MEMCPY3D, ptsz)
TIERRT_DESCRIBED_ASYNC_(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync, CUDA_MEMCPY3D_PEER, TIERRT_SAME_)
TIERRT_DESCRIBED_ASYNC_(cuMemcpy3DPeerAsync_ptsz, cuMemcpy3DPeerAsync, CUDA_MEMCPY3D_PEER, ptsz)

#define TIERRT_PEER_SYNC_(name, stream)                                                             \
  CUresult name(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n) { \
    return peer(dst, src, n, stream(),                                                              \
                [&] { return TIERRT_REAL(name, cuMemcpyPeer)(dst, dst_ctx, src, src_ctx, n); });    \
  }
TIERRT_PEER_SYNC_(cuMemcpyPeer, legacy_default)
TIERRT_PEER_SYNC_(cuMemcpyPeer_ptds, per_thread_default)

#define TIERRT_PEER_ASYNC_(name, stream_of)                                                                    \
  CUresult name(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n, CUstream s) { \
    return peer(dst, src, n, stream_of(s),                                                                     \
                [&] { return TIERRT_REAL(name, cuMemcpyPeerAsync)(dst, dst_ctx, src, src_ctx, n, s); });       \
  }
TIERRT_PEER_ASYNC_(cuMemcpyPeerAsync, TIERRT_SAME_)
TIERRT_PEER_ASYNC_(cuMemcpyPeerAsync_ptsz, ptsz)

#define TIERRT_BATCH_(name, stream_of)                                                                        \
  CUresult name(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs, \
                size_t* attr_idxs, size_t num_attrs, CUstream s) {                                            \
    auto forward = [&] {                                                                                      \
      return TIERRT_REAL(name, cuMemcpyBatchAsync_v2)(dsts, srcs, sizes, count, attrs, attr_idxs, num_attrs, s); \
    };                                                                                                        \
    if (!dsts || !srcs || !sizes) return forward();                                                           \
    return touch(                                                                                             \
        2 * count, [&](size_t i) { return contiguous(i % 2 ? srcs[i / 2] : dsts[i / 2], sizes[i / 2]); },    \
        stream_of(s), forward);                                                                               \
  }
TIERRT_BATCH_(cuMemcpyBatchAsync_v2, TIERRT_SAME_)
TIERRT_BATCH_(cuMemcpyBatchAsync_v2_ptsz, ptsz)

#define TIERRT_BATCH_V1_(name, stream_of)                                                                     \
  CUresult name(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs, \
                size_t* attr_idxs, size_t num_attrs, size_t* fail_idx, CUstream s) {                          \
    auto forward = [&] {                                                                                      \
      return TIERRT_REAL(name, cuMemcpyBatchAsync)(dsts, srcs, sizes, count, attrs, attr_idxs, num_attrs,     \
                                                   fail_idx, s);                                              \
    };                                                                                                        \
    if (!dsts || !srcs || !sizes) return forward();                                                           \
    return touch(                                                                                             \
        2 * count, [&](size_t i) { return contiguous(i % 2 ? srcs[i / 2] : dsts[i / 2], sizes[i / 2]); },    \
        stream_of(s), forward);                                                                               \
  }
TIERRT_BATCH_V1_(cuMemcpyBatchAsync, TIERRT_SAME_)
TIERRT_BATCH_V1_(cuMemcpyBatchAsync_ptsz, ptsz)

#define TIERRT_BATCH_3D_(name, stream_of)                                                                    \
  CUresult name(size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long flags, CUstream s) {           \
    auto forward = [&] { return TIERRT_REAL(name, cuMemcpy3DBatchAsync_v2)(count, ops, flags, s); };         \
    if (!ops) return forward();                                                                              \
    return touch(                                                                                            \
        2 * count, [&](size_t i) { return i % 2 ? copy_source(ops[i / 2]) : copy_destination(ops[i / 2]); }, \
        stream_of(s), forward);                                                                              \
  }
TIERRT_BATCH_3D_(cuMemcpy3DBatchAsync_v2, TIERRT_SAME_)
TIERRT_BATCH_3D_(cuMemcpy3DBatchAsync_v2_ptsz, ptsz)

#define TIERRT_BATCH_3D_V1_(name, stream_of)                                                                 \
  CUresult name(size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail_idx, unsigned long long flags,       \
                CUstream s) {                                                                                \
    auto forward = [&] { return TIERRT_REAL(name, cuMemcpy3DBatchAsync)(count, ops, fail_idx, flags, s); };  \
    if (!ops) return forward();                                                                              \
    return touch(                                                                                            \
        2 * count, [&](size_t i) { return i % 2 ? copy_source(ops[i / 2]) : copy_destination(ops[i / 2]); }, \
        stream_of(s), forward);                                                                              \
  }
TIERRT_BATCH_3D_V1_(cuMemcpy3DBatchAsync, TIERRT_SAME_)
TIERRT_BATCH_3D_V1_(cuMemcpy3DBatchAsync_ptsz, ptsz)

#define TIERRT_MEMSET_2D_(name, proto, value_t, elem, stream)                                          \
  CUresult name(CUdeviceptr dst, size_t pitch, value_t v, size_t width, size_t height) {               \
    return touch(1, [&](size_t) { return memset_2d(dst, pitch, width, height, elem); }, stream(),      \
                 [&] { return TIERRT_REAL(name, proto)(dst, pitch, v, width, height); });              \
  }
TIERRT_MEMSET_2D_(cuMemsetD2D8_v2, cuMemsetD2D8_v2, unsigned char, 1, legacy_default)
TIERRT_MEMSET_2D_(cuMemsetD2D8_v2_ptds, cuMemsetD2D8_v2, unsigned char, 1, per_thread_default)
TIERRT_MEMSET_2D_(cuMemsetD2D16_v2, cuMemsetD2D16_v2, unsigned short, 2, legacy_default)
TIERRT_MEMSET_2D_(cuMemsetD2D16_v2_ptds, cuMemsetD2D16_v2, unsigned short, 2, per_thread_default)
TIERRT_MEMSET_2D_(cuMemsetD2D32_v2, cuMemsetD2D32_v2, unsigned int, 4, legacy_default)
TIERRT_MEMSET_2D_(cuMemsetD2D32_v2_ptds, cuMemsetD2D32_v2, unsigned int, 4, per_thread_default)

#define TIERRT_MEMSET_2D_ASYNC_(name, proto, value_t, elem, stream_of)                                   \
  CUresult name(CUdeviceptr dst, size_t pitch, value_t v, size_t width, size_t height, CUstream s) {     \
    return touch(1, [&](size_t) { return memset_2d(dst, pitch, width, height, elem); }, stream_of(s),    \
                 [&] { return TIERRT_REAL(name, proto)(dst, pitch, v, width, height, s); });             \
  }
TIERRT_MEMSET_2D_ASYNC_(cuMemsetD2D8Async, cuMemsetD2D8Async, unsigned char, 1, TIERRT_SAME_)
TIERRT_MEMSET_2D_ASYNC_(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async, unsigned char, 1, ptsz)
TIERRT_MEMSET_2D_ASYNC_(cuMemsetD2D16Async, cuMemsetD2D16Async, unsigned short, 2, TIERRT_SAME_)
TIERRT_MEMSET_2D_ASYNC_(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async, unsigned short, 2, ptsz)
TIERRT_MEMSET_2D_ASYNC_(cuMemsetD2D32Async, cuMemsetD2D32Async, unsigned int, 4, TIERRT_SAME_)
TIERRT_MEMSET_2D_ASYNC_(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async, unsigned int, 4, ptsz)

#define TIERRT_MEM_OP_(name, proto, value_t, bytes, stream_of)                                  \
  CUresult name(CUstream s, CUdeviceptr addr, value_t v, unsigned flags) {                      \
    return one_word(addr, bytes, stream_of(s), [&] { return TIERRT_REAL(name, proto)(s, addr, v, flags); }); \
  }
TIERRT_MEM_OP_(cuStreamWriteValue32_v2, cuStreamWriteValue32_v2, cuuint32_t, 4, TIERRT_SAME_)
TIERRT_MEM_OP_(cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue32_v2, cuuint32_t, 4, ptsz)
TIERRT_MEM_OP_(cuStreamWriteValue64_v2, cuStreamWriteValue64_v2, cuuint64_t, 8, TIERRT_SAME_)
TIERRT_MEM_OP_(cuStreamWriteValue64_v2_ptsz, cuStreamWriteValue64_v2, cuuint64_t, 8, ptsz)
TIERRT_MEM_OP_(cuStreamWaitValue32_v2, cuStreamWaitValue32_v2, cuuint32_t, 4, TIERRT_SAME_)
TIERRT_MEM_OP_(cuStreamWaitValue32_v2_ptsz, cuStreamWaitValue32_v2, cuuint32_t, 4, ptsz)
TIERRT_MEM_OP_(cuStreamWaitValue64_v2, cuStreamWaitValue64_v2, cuuint64_t, 8, TIERRT_SAME_)
TIERRT_MEM_OP_(cuStreamWaitValue64_v2_ptsz, cuStreamWaitValue64_v2, cuuint64_t, 8, ptsz)
TIERRT_MEM_OP_(cuStreamWriteValue32, cuStreamWriteValue32_v2, cuuint32_t, 4, TIERRT_SAME_)
TIERRT_MEM_OP_(cuStreamWriteValue32_ptsz, cuStreamWriteValue32_v2, cuuint32_t, 4, ptsz)
TIERRT_MEM_OP_(cuStreamWriteValue64, cuStreamWriteValue64_v2, cuuint64_t, 8, TIERRT_SAME_)
TIERRT_MEM_OP_(cuStreamWriteValue64_ptsz, cuStreamWriteValue64_v2, cuuint64_t, 8, ptsz)
TIERRT_MEM_OP_(cuStreamWaitValue32, cuStreamWaitValue32_v2, cuuint32_t, 4, TIERRT_SAME_)
TIERRT_MEM_OP_(cuStreamWaitValue32_ptsz, cuStreamWaitValue32_v2, cuuint32_t, 4, ptsz)
TIERRT_MEM_OP_(cuStreamWaitValue64, cuStreamWaitValue64_v2, cuuint64_t, 8, TIERRT_SAME_)
TIERRT_MEM_OP_(cuStreamWaitValue64_ptsz, cuStreamWaitValue64_v2, cuuint64_t, 8, ptsz)

#define TIERRT_BATCH_MEM_OP_(name, stream_of)                                                                \
  CUresult name(CUstream s, unsigned count, CUstreamBatchMemOpParams* ops, unsigned flags) {                 \
    auto forward = [&] { return TIERRT_REAL(name, cuStreamBatchMemOp_v2)(s, count, ops, flags); };           \
    if (!ops) return forward();                                                                              \
    return touch(count, [&](size_t i) { return memory_operation_target(ops[i]); }, stream_of(s), forward);   \
  }
TIERRT_BATCH_MEM_OP_(cuStreamBatchMemOp_v2, TIERRT_SAME_)
TIERRT_BATCH_MEM_OP_(cuStreamBatchMemOp_v2_ptsz, ptsz)
TIERRT_BATCH_MEM_OP_(cuStreamBatchMemOp, TIERRT_SAME_)
TIERRT_BATCH_MEM_OP_(cuStreamBatchMemOp_ptsz, ptsz)

}  // extern "C"
