// The copy and memset entry points by shape (2D, 3D, peer, batches), the
// stream memory operations and the pointer queries, reached one of the ways
// applications reach the driver, under LD_PRELOAD=libtierrt.so:
//   shapes_probe PATH
// PATH: direct | dlsym | procaddr-11030 | procaddr-12000 | procaddr-12080 |
//       procaddr-13000 | procaddr-ptsz
// Each entry point is called with a spilled block as its device operand:
// tierrt must make the block resident for it (a demand fetch) before the
// driver's own function runs. Then the pointer queries of a spilled block
// must be those of an untiered allocation of the same size. Exit status 0
// means success.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tierrt/tierrt.h"

#undef cuGetProcAddress
extern "C" CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);
// The first forms of these, which cuda.h no longer declares.
#undef cuMemcpyBatchAsync
#undef cuStreamWriteValue32
extern "C" CUresult CUDAAPI cuMemcpyBatchAsync(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*,
                                               size_t*, size_t, size_t*, CUstream);
extern "C" CUresult CUDAAPI cuStreamWriteValue32(CUstream, CUdeviceptr, cuuint32_t, unsigned);

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "shapes_probe: %s\n", why.c_str());
  std::exit(1);
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) fail(std::string(what) + " failed with CUresult " + std::to_string(r));
}

tierrt_stats stats_now() {
  auto get = reinterpret_cast<int (*)(tierrt_stats*)>(dlsym(RTLD_DEFAULT, "tierrt_get_stats"));
  tierrt_stats s{};
  s.struct_size = sizeof s;
  if (!get || get(&s) != 0) fail("tierrt is not running");
  return s;
}

void spill(CUdeviceptr p) {
  auto advise = reinterpret_cast<int (*)(const void*, tierrt_advice)>(dlsym(RTLD_DEFAULT, "tierrt_advise"));
  if (!advise) fail("tierrt is not preloaded");
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  const std::uint64_t before = stats_now().spilled_blocks;
  for (int i = 0; i < 2000 && advise(reinterpret_cast<const void*>(p), TIERRT_ADVISE_SPILL) != 0; ++i) usleep(1000);
  for (int i = 0; i < 2000 && stats_now().spilled_blocks == before; ++i) usleep(1000);
  if (stats_now().spilled_blocks == before) fail("the block never reached SPILLED");
}

// One entry point: the name cuGetProcAddress is asked for, the exported
// name a loader passes to dlsym, its address as a program linked with
// -lcuda sees it, and a call naming `p` as its device operand.
struct EntryPoint {
  const char* symbol;
  int since;  // the CUDA version that introduced the form the call uses
  const char* exported;
  void* direct;
  std::function<CUresult(void* fn, CUdeviceptr p)> call;
};

template <class Fn>
Fn as(void* fn) {
  return reinterpret_cast<Fn>(fn);
}

CUDA_MEMCPY2D copy_2d(CUdeviceptr p) {
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = p;
  c.srcPitch = 4096;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = p + (2u << 20);
  c.dstPitch = 4096;
  c.WidthInBytes = 1024;
  c.Height = 4;
  return c;
}

CUDA_MEMCPY3D copy_3d(CUdeviceptr p) {
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = p;
  c.srcPitch = 4096;
  c.srcHeight = 4;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  static char host[4096 * 8];
  c.dstHost = host;
  c.dstPitch = 1024;
  c.dstHeight = 4;
  c.WidthInBytes = 1024;
  c.Height = 4;
  c.Depth = 2;
  return c;
}

CUDA_MEMCPY3D_PEER copy_3d_peer(CUdeviceptr p, CUcontext ctx) {
  CUDA_MEMCPY3D_PEER c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = p;
  c.srcContext = ctx;
  c.srcPitch = 4096;
  c.srcHeight = 4;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = p + (2u << 20);
  c.dstContext = ctx;
  c.dstPitch = 4096;
  c.dstHeight = 4;
  c.WidthInBytes = 1024;
  c.Height = 4;
  c.Depth = 1;
  return c;
}

CUDA_MEMCPY3D_BATCH_OP batch_op(CUdeviceptr p) {
  CUDA_MEMCPY3D_BATCH_OP op{};
  op.src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  op.src.op.ptr.ptr = p;
  op.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  op.dst.op.ptr.ptr = p + (2u << 20);
  op.extent = {1024, 2, 1};
  op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  return op;
}

std::vector<EntryPoint> entry_points(CUcontext ctx, CUstream s) {
  static CUdeviceptr host_word[2];
  static size_t sizes[1] = {4096};
  static CUmemcpyAttributes attrs{};
  static size_t attr_idx = 0, fail_idx = 0;
  attrs.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  auto host = reinterpret_cast<CUdeviceptr>(&host_word[0]);
  return {
      {"cuMemcpy2D", 3020, "cuMemcpy2D_v2", reinterpret_cast<void*>(&::cuMemcpy2D_v2),
       [](void* fn, CUdeviceptr p) {
         CUDA_MEMCPY2D c = copy_2d(p);
         return as<decltype(&::cuMemcpy2D_v2)>(fn)(&c);
       }},
      {"cuMemcpy2DUnaligned", 3020, "cuMemcpy2DUnaligned_v2", reinterpret_cast<void*>(&::cuMemcpy2DUnaligned_v2),
       [](void* fn, CUdeviceptr p) {
         CUDA_MEMCPY2D c = copy_2d(p);
         return as<decltype(&::cuMemcpy2DUnaligned_v2)>(fn)(&c);
       }},
      {"cuMemcpy2DAsync", 3020, "cuMemcpy2DAsync_v2", reinterpret_cast<void*>(&::cuMemcpy2DAsync_v2),
       [s](void* fn, CUdeviceptr p) {
         CUDA_MEMCPY2D c = copy_2d(p);
         return as<decltype(&::cuMemcpy2DAsync_v2)>(fn)(&c, s);
       }},
      {"cuMemcpy3D", 3020, "cuMemcpy3D_v2", reinterpret_cast<void*>(&::cuMemcpy3D_v2),
       [](void* fn, CUdeviceptr p) {
         CUDA_MEMCPY3D c = copy_3d(p);
         return as<decltype(&::cuMemcpy3D_v2)>(fn)(&c);
       }},
      {"cuMemcpy3DAsync", 3020, "cuMemcpy3DAsync_v2", reinterpret_cast<void*>(&::cuMemcpy3DAsync_v2),
       [s](void* fn, CUdeviceptr p) {
         CUDA_MEMCPY3D c = copy_3d(p);
         return as<decltype(&::cuMemcpy3DAsync_v2)>(fn)(&c, s);
       }},
      {"cuMemcpyPeer", 4000, "cuMemcpyPeer", reinterpret_cast<void*>(&::cuMemcpyPeer),
       [ctx](void* fn, CUdeviceptr p) { return as<decltype(&::cuMemcpyPeer)>(fn)(p + (2u << 20), ctx, p, ctx, 4096); }},
      {"cuMemcpyPeerAsync", 4000, "cuMemcpyPeerAsync", reinterpret_cast<void*>(&::cuMemcpyPeerAsync),
       [ctx, s](void* fn, CUdeviceptr p) {
         return as<decltype(&::cuMemcpyPeerAsync)>(fn)(p + (2u << 20), ctx, p, ctx, 4096, s);
       }},
      {"cuMemcpy3DPeer", 4000, "cuMemcpy3DPeer", reinterpret_cast<void*>(&::cuMemcpy3DPeer),
       [ctx](void* fn, CUdeviceptr p) {
         CUDA_MEMCPY3D_PEER c = copy_3d_peer(p, ctx);
         return as<decltype(&::cuMemcpy3DPeer)>(fn)(&c);
       }},
      {"cuMemcpy3DPeerAsync", 4000, "cuMemcpy3DPeerAsync", reinterpret_cast<void*>(&::cuMemcpy3DPeerAsync),
       [ctx, s](void* fn, CUdeviceptr p) {
         CUDA_MEMCPY3D_PEER c = copy_3d_peer(p, ctx);
         return as<decltype(&::cuMemcpy3DPeerAsync)>(fn)(&c, s);
       }},
      {"cuMemcpyBatchAsync", 12080, "cuMemcpyBatchAsync", reinterpret_cast<void*>(&::cuMemcpyBatchAsync),
       [s, host](void* fn, CUdeviceptr p) {
         CUdeviceptr dsts[1] = {host}, srcs[1] = {p};
         return as<decltype(&::cuMemcpyBatchAsync)>(fn)(dsts, srcs, sizes, 1, &attrs, &attr_idx, 1, &fail_idx, s);
       }},
      {"cuMemcpyBatchAsync", 13000, "cuMemcpyBatchAsync_v2", reinterpret_cast<void*>(&::cuMemcpyBatchAsync_v2),
       [s, host](void* fn, CUdeviceptr p) {
         CUdeviceptr dsts[1] = {p}, srcs[1] = {host};
         return as<decltype(&::cuMemcpyBatchAsync_v2)>(fn)(dsts, srcs, sizes, 1, &attrs, &attr_idx, 1, s);
       }},
      {"cuMemcpy3DBatchAsync", 13000, "cuMemcpy3DBatchAsync_v2", reinterpret_cast<void*>(&::cuMemcpy3DBatchAsync_v2),
       [s](void* fn, CUdeviceptr p) {
         CUDA_MEMCPY3D_BATCH_OP op = batch_op(p);
         return as<decltype(&::cuMemcpy3DBatchAsync_v2)>(fn)(1, &op, 0, s);
       }},
      {"cuMemsetD2D8", 3020, "cuMemsetD2D8_v2", reinterpret_cast<void*>(&::cuMemsetD2D8_v2),
       [](void* fn, CUdeviceptr p) { return as<decltype(&::cuMemsetD2D8_v2)>(fn)(p, 4096, 1, 1024, 4); }},
      {"cuMemsetD2D16", 3020, "cuMemsetD2D16_v2", reinterpret_cast<void*>(&::cuMemsetD2D16_v2),
       [](void* fn, CUdeviceptr p) { return as<decltype(&::cuMemsetD2D16_v2)>(fn)(p, 4096, 1, 512, 4); }},
      {"cuMemsetD2D32", 3020, "cuMemsetD2D32_v2", reinterpret_cast<void*>(&::cuMemsetD2D32_v2),
       [](void* fn, CUdeviceptr p) { return as<decltype(&::cuMemsetD2D32_v2)>(fn)(p, 4096, 1, 256, 4); }},
      {"cuMemsetD2D8Async", 3020, "cuMemsetD2D8Async", reinterpret_cast<void*>(&::cuMemsetD2D8Async),
       [s](void* fn, CUdeviceptr p) { return as<decltype(&::cuMemsetD2D8Async)>(fn)(p, 4096, 1, 1024, 4, s); }},
      {"cuMemsetD2D16Async", 3020, "cuMemsetD2D16Async", reinterpret_cast<void*>(&::cuMemsetD2D16Async),
       [s](void* fn, CUdeviceptr p) { return as<decltype(&::cuMemsetD2D16Async)>(fn)(p, 4096, 1, 512, 4, s); }},
      {"cuMemsetD2D32Async", 3020, "cuMemsetD2D32Async", reinterpret_cast<void*>(&::cuMemsetD2D32Async),
       [s](void* fn, CUdeviceptr p) { return as<decltype(&::cuMemsetD2D32Async)>(fn)(p, 4096, 1, 256, 4, s); }},
      {"cuStreamWriteValue32", 8000, "cuStreamWriteValue32", reinterpret_cast<void*>(&::cuStreamWriteValue32),
       [s](void* fn, CUdeviceptr p) { return as<decltype(&::cuStreamWriteValue32)>(fn)(s, p, 1, 0); }},
      {"cuStreamWriteValue32", 11070, "cuStreamWriteValue32_v2", reinterpret_cast<void*>(&::cuStreamWriteValue32_v2),
       [s](void* fn, CUdeviceptr p) { return as<decltype(&::cuStreamWriteValue32_v2)>(fn)(s, p, 1, 0); }},
      {"cuStreamWriteValue64", 11070, "cuStreamWriteValue64_v2", reinterpret_cast<void*>(&::cuStreamWriteValue64_v2),
       [s](void* fn, CUdeviceptr p) { return as<decltype(&::cuStreamWriteValue64_v2)>(fn)(s, p, 1, 0); }},
      {"cuStreamWaitValue32", 11070, "cuStreamWaitValue32_v2", reinterpret_cast<void*>(&::cuStreamWaitValue32_v2),
       [s](void* fn, CUdeviceptr p) {
         return as<decltype(&::cuStreamWaitValue32_v2)>(fn)(s, p, 0, CU_STREAM_WAIT_VALUE_GEQ);
       }},
      {"cuStreamWaitValue64", 11070, "cuStreamWaitValue64_v2", reinterpret_cast<void*>(&::cuStreamWaitValue64_v2),
       [s](void* fn, CUdeviceptr p) {
         return as<decltype(&::cuStreamWaitValue64_v2)>(fn)(s, p, 0, CU_STREAM_WAIT_VALUE_GEQ);
       }},
      {"cuStreamBatchMemOp", 11070, "cuStreamBatchMemOp_v2", reinterpret_cast<void*>(&::cuStreamBatchMemOp_v2),
       [s](void* fn, CUdeviceptr p) {
         CUstreamBatchMemOpParams ops[2]{};
         ops[0].flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
         ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
         ops[1].writeValue.address = p + 64;
         return as<decltype(&::cuStreamBatchMemOp_v2)>(fn)(s, 2, ops, 0);
       }},
  };
}

using GetProc2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

// The entry point as `path` finds it; null where that path does not offer
// this form (an older version than the form).
void* find(const std::string& path, const EntryPoint& e) {
  if (path == "direct") return e.direct;
  if (path == "dlsym") {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) fail("dlopen libcuda.so.1");
    void* fn = dlsym(h, e.exported);
    if (!fn) fail(std::string("dlsym ") + e.exported);
    return fn;
  }
  int version = 13000;
  cuuint64_t flags = 0;
  if (path == "procaddr-ptsz") flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  else if (path.rfind("procaddr-", 0) == 0) version = std::stoi(path.substr(9));
  else fail("unknown path " + path);
  // cuGetProcAddress gives the newest form at the version asked for: the
  // call fits only that form.
  void* fn = nullptr;
  CUdriverProcAddressQueryResult st{};
  check(cuGetProcAddress_v2(e.symbol, &fn, version, flags, &st), "cuGetProcAddress");
  return st == CU_GET_PROC_ADDRESS_SUCCESS ? fn : nullptr;
}

// The newest form not above `version` for each symbol: what cuGetProcAddress returns.
bool newest_at(const std::vector<EntryPoint>& all, const EntryPoint& e, int version) {
  if (e.since > version) return false;
  for (const EntryPoint& other : all)
    if (std::strcmp(other.symbol, e.symbol) == 0 && other.since <= version && other.since > e.since) return false;
  return true;
}

void every_entry_point_fetches_its_operand(const std::string& path, CUdeviceptr p, CUcontext ctx, CUstream s) {
  const std::vector<EntryPoint> all = entry_points(ctx, s);
  const int version = path.rfind("procaddr-", 0) == 0 && path != "procaddr-ptsz" ? std::stoi(path.substr(9)) : 13000;
  int called = 0;
  for (const EntryPoint& e : all) {
    if (path.rfind("procaddr", 0) == 0 && !newest_at(all, e, version)) continue;
    void* fn = find(path, e);
    if (!fn) continue;
    spill(p);
    const std::uint64_t before = stats_now().demand_fetches;
    const CUresult r = e.call(fn, p);
    if (stats_now().demand_fetches == before)
      fail(std::string(e.exported) + " (" + path + ") ran without making its spilled operand resident (CUresult " +
           std::to_string(r) + ")");
    ++called;
  }
  if (called == 0) fail("no entry point found through " + path);
  std::printf("%d entry points through %s made their spilled operand resident\n", called, path.c_str());
}

// A spilled block's pointer queries are those of an untiered allocation of
// the same size; a small allocation's range is its own.
void pointer_queries(CUdeviceptr p, size_t bytes) {
  spill(p);
  CUcontext want = nullptr, got = nullptr;
  check(cuCtxGetCurrent(&want), "cuCtxGetCurrent");
  check(cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_CONTEXT, p + 100), "cuPointerGetAttribute(CONTEXT)");
  if (got != want) fail("a spilled block's context is not the allocation's");
  int ordinal = -1;
  check(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p), "cuPointerGetAttribute(ORDINAL)");
  CUdeviceptr base = 0;
  size_t size = 0;
  check(cuMemGetAddressRange_v2(&base, &size, p + 100), "cuMemGetAddressRange of a spilled block");
  if (base != p || size != bytes)
    fail("cuMemGetAddressRange of a spilled block says " + std::to_string(size) + " bytes, not " +
         std::to_string(bytes));
  CUdeviceptr small = 0;
  check(cuMemAlloc_v2(&small, 4096), "cuMemAlloc (small)");
  check(cuMemGetAddressRange_v2(&base, &size, small + 10), "cuMemGetAddressRange of a small allocation");
  if (base != small || size != 4096) fail("a small allocation's range is " + std::to_string(size) + " bytes");
  check(cuMemFree_v2(small), "cuMemFree (small)");
  std::printf("pointer queries of a spilled block and a small allocation are the allocations' own\n");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "direct";
  CUdevice dev;
  CUcontext ctx;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  // Not a multiple of the granularity: the block maps more than it reports.
  const size_t bytes = (3u << 20) + 4096;
  CUdeviceptr p = 0;
  check(cuMemAlloc_v2(&p, bytes), "cuMemAlloc");
  check(cuMemsetD8_v2(p, 7, bytes), "cuMemsetD8");
  every_entry_point_fetches_its_operand(path, p, ctx, s);
  pointer_queries(p, bytes);
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  check(cuMemFree_v2(p), "cuMemFree");
  return 0;
}
