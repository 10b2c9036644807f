// Copies and memsets. Each is work on a stream (copy_work.h): what crosses
// the link goes through the copy engine of its direction; device-to-device
// copies and memsets run on the stream's worker, as kernels would.
#include <cstring>

#include "capture.h"
#include "copy_work.h"
#include "device_bytes.h"
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

// Host memory of any kind, wherever it is mapped: bytes there cross the link.
bool in_host_memory(uint64_t p) {
  AddressSpace& m = state().memory;
  if (!m.in_arena(p)) return true;  // pageable or pinned host memory
  return m.resolve(p).host_backed;
}

// The engine of the link a copy crosses, or null for one within the device.
CopyEngine* link_engine(uint64_t dst, uint64_t src) {
  if (in_host_memory(src)) return &state().h2d;
  if (in_host_memory(dst)) return &state().d2h;
  return nullptr;
}

// Runs on the stream's worker.
CUresult run_copy(uint64_t dst, uint64_t src, size_t n) {
  AddressSpace& m = state().memory;
  Access acc[2] = {{dst, n, true}, {src, n, false}};
  uint64_t token = 0;
  std::vector<std::pair<uint64_t, uint64_t>> fill;
  if (CUresult e = m.begin_use(acc, 2, &token, &fill)) return e;
  [[maybe_unused]] DeviceBytesMove untracked;
  // Page tables of memory mapped since it was last touched are filled first,
  // within the copy's modeled time (what the host costs, not the device).
  auto move = [&] {
    for (auto [b, e] : fill) AddressSpace::fill_page_tables(b, e);
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  };
  if (CopyEngine* engine = link_engine(dst, src))
    engine->occupy(n, move);
  else
    move();
  m.end_use(token);
  return CUDA_SUCCESS;
}

void fill(uint64_t dst, uint32_t value, unsigned elem, size_t count) {
  if (elem == 1) {
    std::memset(reinterpret_cast<void*>(dst), static_cast<int>(value & 0xff), count);
  } else if (elem == 2) {
    auto* p = reinterpret_cast<uint16_t*>(dst);
    for (size_t i = 0; i < count; ++i) p[i] = static_cast<uint16_t>(value);
  } else {
    auto* p = reinterpret_cast<uint32_t*>(dst);
    for (size_t i = 0; i < count; ++i) p[i] = value;
  }
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
  // Refused at the call when device memory it names is not mapped (read on
  // NVIDIA's driver 580): nothing is queued and the context stays usable.
  AddressSpace& m = state().memory;
  if (!m.mapped({dst, n, true}) || !m.mapped({src, n, false})) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, per_thread, ctx, &s)) return e;
  bool pageable = (dir == Dir::kHtoD && !is_device_side(src)) || (dir == Dir::kDtoH && !is_device_side(dst));
  uint64_t seq = 0;
  if (CUresult e = submit(s, copy_work(dst, src, n), &seq)) return e;
  return sync || pageable ? wait_for(s, seq) : CUDA_SUCCESS;
}

CUresult memset(Context* ctx, uint64_t dst, uint32_t value, unsigned elem, size_t count, CUstream h, bool per_thread) {
  if (count == 0) return CUDA_SUCCESS;
  if (!dst || dst % elem != 0 || !is_device_side(dst)) return CUDA_ERROR_INVALID_VALUE;
  if (!state().memory.mapped({dst, count * elem, true})) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, per_thread, ctx, &s)) return e;
  return submit(s, memset_work(dst, count * elem, value, elem, count, 1));
}

}  // namespace

namespace simdev {

Work copy_work(uint64_t dst, uint64_t src, size_t n) {
  Work w;
  w.node_type = CU_GRAPH_NODE_TYPE_MEMCPY;
  w.run = [=] { return run_copy(dst, src, n); };
  return w;
}

Work memset_work(uint64_t dst, size_t pitch, uint32_t value, unsigned elem, size_t width, size_t height) {
  Work w;
  w.node_type = CU_GRAPH_NODE_TYPE_MEMSET;
  w.run = [=] {
    AddressSpace& m = state().memory;
    std::vector<Access> rows;
    for (size_t r = 0; r < height; ++r) rows.push_back({dst + r * pitch, width * elem, true});
    uint64_t token = 0;
    std::vector<std::pair<uint64_t, uint64_t>> tables;
    if (CUresult e = m.begin_use(rows.data(), rows.size(), &token, &tables)) return e;
    auto set_rows = [&] {
      for (auto [b, e] : tables) AddressSpace::fill_page_tables(b, e);
      [[maybe_unused]] DeviceBytesMove untracked;
      for (size_t r = 0; r < height; ++r) fill(dst + r * pitch, value, elem, width);
    };
    if (in_host_memory(dst)) state().d2h.occupy(width * elem * height, set_rows);
    else set_rows();
    m.end_use(token);
    return CUDA_SUCCESS;
  };
  return w;
}

CUresult memcpy3d_work(const CUDA_MEMCPY3D& p, Work* out) {
  auto base = [](CUmemorytype type, const void* host, CUdeviceptr dev, uint64_t* b) {
    switch (type) {
      case CU_MEMORYTYPE_HOST: *b = u(host); return host != nullptr;
      case CU_MEMORYTYPE_DEVICE:
      case CU_MEMORYTYPE_UNIFIED: *b = dev; return dev != 0;
      default: return false;  // arrays are not modelled
    }
  };
  uint64_t src = 0, dst = 0;
  if (!base(p.srcMemoryType, p.srcHost, p.srcDevice, &src) || !base(p.dstMemoryType, p.dstHost, p.dstDevice, &dst))
    return CUDA_ERROR_INVALID_VALUE;
  size_t width = p.WidthInBytes, height = p.Height ? p.Height : 1, depth = p.Depth ? p.Depth : 1;
  size_t src_pitch = p.srcPitch ? p.srcPitch : width, dst_pitch = p.dstPitch ? p.dstPitch : width;
  size_t src_rows = p.srcHeight ? p.srcHeight : height, dst_rows = p.dstHeight ? p.dstHeight : height;
  if (width == 0 || src_pitch < width || dst_pitch < width) return CUDA_ERROR_INVALID_VALUE;
  src += p.srcXInBytes + (p.srcZ * src_rows + p.srcY) * src_pitch;
  dst += p.dstXInBytes + (p.dstZ * dst_rows + p.dstY) * dst_pitch;
  Work w;
  w.node_type = CU_GRAPH_NODE_TYPE_MEMCPY;
  w.run = [=] {
    for (size_t z = 0; z < depth; ++z)
      for (size_t y = 0; y < height; ++y)
        if (CUresult e = run_copy(dst + (z * dst_rows + y) * dst_pitch, src + (z * src_rows + y) * src_pitch, width))
          return e;
    return CUDA_SUCCESS;
  };
  *out = std::move(w);
  return CUDA_SUCCESS;
}

}  // namespace simdev

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

// Between devices: the driver stages such copies, so no peer access is
// needed (CUDA Driver API, Memory Management, cuMemcpyPeer).
#define SIMDEV_COPY_PEER(name, site, ptds)                                                                    \
  SIMDEV_API CUresult CUDAAPI name(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n) { \
    SIMDEV_ENTER_CTX(site, CUDA_ERROR_INVALID_VALUE, ctx);                                                    \
    if (!valid_context(dst_ctx) || !valid_context(src_ctx)) return CUDA_ERROR_INVALID_CONTEXT;                \
    return copy(ctx, Dir::kDtoD, dst, src, n, nullptr, ptds, true);                                           \
  }
#define SIMDEV_COPY_PEER_ASYNC(name, site, ptsz)                                                              \
  SIMDEV_API CUresult CUDAAPI name(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n, \
                                   CUstream h) {                                                              \
    SIMDEV_ENTER_CTX(site, CUDA_ERROR_INVALID_VALUE, ctx);                                                    \
    if (!valid_context(dst_ctx) || !valid_context(src_ctx)) return CUDA_ERROR_INVALID_CONTEXT;                \
    return copy(ctx, Dir::kDtoD, dst, src, n, h, ptsz, false);                                                \
  }
SIMDEV_COPY_PEER(cuMemcpyPeer, "cuMemcpyPeer", false)
SIMDEV_COPY_PEER(cuMemcpyPeer_ptds, "cuMemcpyPeer", true)
SIMDEV_COPY_PEER_ASYNC(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", false)
SIMDEV_COPY_PEER_ASYNC(cuMemcpyPeerAsync_ptsz, "cuMemcpyPeerAsync", true)

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
