// NCCL's host API under LD_PRELOAD=libtierrt.so, against the stand-in
// libnccl.so.2 (tests/nccl_standin), whose kernel reaches its buffers only
// through a device-side work queue, as NCCL's does:
//   nccl_probe PATH
// PATH: direct (linked with -lnccl) | dlsym (dlopen of libnccl.so.2).
// Collectives on spilled buffers must see their bytes, a buffer a running
// collective writes must not move under it, and a registered buffer must
// not move at all. Exit status 0 means success.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "preload/nccl_abi.h"
#include "simdev/simdev.h"
#include "tierrt/tierrt.h"

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "nccl_probe: %s\n", why.c_str());
  std::exit(1);
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) fail(std::string(what) + " failed with CUresult " + std::to_string(r));
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail(std::string(what) + " failed with ncclResult_t " + std::to_string(r));
}

struct Nccl {
  decltype(&::ncclCommInitRank) init;
  decltype(&::ncclAllReduce) all_reduce;
  decltype(&::ncclAllGather) all_gather;
  decltype(&::ncclAlltoAll) all_to_all;
  decltype(&::ncclSend) send;
  decltype(&::ncclRecv) recv;
  decltype(&::ncclGroupStart) group_start;
  decltype(&::ncclGroupEnd) group_end;
  decltype(&::ncclCommRegister) reg;
  decltype(&::ncclCommDeregister) dereg;
  decltype(&::ncclCommDestroy) destroy;
};

Nccl nccl_for(const std::string& path) {
  if (path == "direct")
    return {&::ncclCommInitRank, &::ncclAllReduce, &::ncclAllGather, &::ncclAlltoAll, &::ncclSend, &::ncclRecv,
            &::ncclGroupStart, &::ncclGroupEnd, &::ncclCommRegister, &::ncclCommDeregister, &::ncclCommDestroy};
  if (path != "dlsym") fail("unknown path " + path);
  void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) fail(std::string("dlopen libnccl.so.2: ") + dlerror());
  Nccl n{};
#define LOAD_(field, name)                                                \
  n.field = reinterpret_cast<decltype(n.field)>(dlsym(h, name));          \
  if (!n.field) fail(std::string("dlsym ") + name);
  LOAD_(init, "ncclCommInitRank") LOAD_(all_reduce, "ncclAllReduce") LOAD_(all_gather, "ncclAllGather")
  LOAD_(all_to_all, "ncclAlltoAll")
  LOAD_(send, "ncclSend") LOAD_(recv, "ncclRecv") LOAD_(group_start, "ncclGroupStart")
  LOAD_(group_end, "ncclGroupEnd") LOAD_(reg, "ncclCommRegister") LOAD_(dereg, "ncclCommDeregister")
  LOAD_(destroy, "ncclCommDestroy")
#undef LOAD_
  return n;
}

tierrt_stats stats_now() {
  auto get = reinterpret_cast<int (*)(tierrt_stats*)>(dlsym(RTLD_DEFAULT, "tierrt_get_stats"));
  tierrt_stats s{};
  s.struct_size = sizeof s;
  if (!get || get(&s) != 0) fail("tierrt is not running");
  return s;
}

int advise(CUdeviceptr p, tierrt_advice a) {
  auto fn = reinterpret_cast<int (*)(const void*, tierrt_advice)>(dlsym(RTLD_DEFAULT, "tierrt_advise"));
  if (!fn) fail("tierrt is not preloaded");
  return fn(reinterpret_cast<const void*>(p), a);
}

void spill_all(const std::vector<CUdeviceptr>& blocks) {
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  const std::uint64_t before = stats_now().spilled_blocks;
  for (CUdeviceptr p : blocks)
    for (int i = 0; i < 2000 && advise(p, TIERRT_ADVISE_SPILL) != 0; ++i) usleep(1000);
  for (int i = 0; i < 2000 && stats_now().spilled_blocks < before + blocks.size(); ++i) usleep(1000);
  if (stats_now().spilled_blocks < before + blocks.size()) fail("the buffers never reached SPILLED");
}

constexpr size_t kBytes = 4u << 20, kWords = kBytes / 4;

void fill(CUdeviceptr p, std::uint32_t seed) {
  std::vector<std::uint32_t> v(kWords);
  for (size_t i = 0; i < kWords; ++i) v[i] = seed * 2654435761u + static_cast<std::uint32_t>(i);
  check(cuMemcpyHtoD_v2(p, v.data(), kBytes), "cuMemcpyHtoD");
}

void expect(CUdeviceptr p, std::uint32_t seed, const char* what) {
  std::vector<std::uint32_t> v(kWords);
  check(cuMemcpyDtoH_v2(v.data(), p, kBytes), "cuMemcpyDtoH");
  for (size_t i = 0; i < kWords; ++i)
    if (v[i] != seed * 2654435761u + static_cast<std::uint32_t>(i))
      fail(std::string(what) + ": word " + std::to_string(i) + " is not what the collective wrote");
}

// A kernel that keeps its stream busy for a while and touches nothing.
void busy_kernel(const simdev_launch*) {}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "direct";
  CUdevice dev;
  CUcontext ctx;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  const Nccl n = nccl_for(path);
  ncclComm_t comm;
  check_nccl(n.init(&comm, 1, ncclUniqueId{}, 0), "ncclCommInitRank");
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  CUdeviceptr a, b, c;
  for (CUdeviceptr* p : {&a, &b, &c}) check(cuMemAlloc_v2(p, kBytes), "cuMemAlloc");
  fill(a, 1);
  fill(b, 2);
  fill(c, 3);

  // A collective on spilled buffers: both are made resident for it.
  spill_all({a, b});
  const std::uint64_t demanded = stats_now().demand_fetches;
  check_nccl(n.all_reduce(reinterpret_cast<void*>(a), reinterpret_cast<void*>(b), kWords, ncclUint32, ncclSum, comm,
                          s),
             "ncclAllReduce");
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  expect(b, 1, "ncclAllReduce on spilled buffers");
  if (stats_now().demand_fetches < demanded + 2) fail("ncclAllReduce ran without making its buffers resident");

  // The same for an all-to-all, whose buffers span every rank's share.
  spill_all({c, b});
  const std::uint64_t demanded_again = stats_now().demand_fetches;
  check_nccl(n.all_to_all(reinterpret_cast<void*>(c), reinterpret_cast<void*>(b), kWords, ncclUint32, comm, s),
             "ncclAlltoAll");
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  expect(b, 3, "ncclAlltoAll on spilled buffers");
  if (stats_now().demand_fetches < demanded_again + 2) fail("ncclAlltoAll ran without making its buffers resident");

  // A group: the send and the receive are enqueued at its end.
  spill_all({c, b});
  check_nccl(n.group_start(), "ncclGroupStart");
  check_nccl(n.send(reinterpret_cast<void*>(c), kWords, ncclUint32, 0, comm, s), "ncclSend");
  check_nccl(n.recv(reinterpret_cast<void*>(b), kWords, ncclUint32, 0, comm, s), "ncclRecv");
  check_nccl(n.group_end(), "ncclGroupEnd");
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  expect(b, 3, "ncclSend/ncclRecv in a group");

  // Its use is recorded: a collective waiting behind a long kernel, and a
  // spill of its receive buffer asked for at once, which must wait for it.
  static const size_t no_params[] = {0};
  simdev_kernel_desc busy{"nccl_probe_busy", &busy_kernel, 0, no_params, nullptr, 200000000};
  if (simdev_try_register_kernel(&busy) != 0) fail("runs on simdev only");
  CUmodule m;
  CUfunction f;
  check(cuModuleLoadData(&m, "simdev host kernels"), "cuModuleLoadData");
  check(cuModuleGetFunction(&f, m, busy.name), "cuModuleGetFunction");
  check(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr), "cuLaunchKernel (busy)");
  check_nccl(n.all_gather(reinterpret_cast<void*>(a), reinterpret_cast<void*>(b), kWords, ncclUint32, comm, s),
             "ncclAllGather");
  advise(b, TIERRT_ADVISE_SPILL);
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  expect(b, 1, "a spill asked for while ncclAllGather was pending");

  // A registered buffer keeps its device memory until deregistered.
  void* handle = nullptr;
  check_nccl(n.reg(comm, reinterpret_cast<void*>(c), kBytes, &handle), "ncclCommRegister");
  if (advise(c, TIERRT_ADVISE_SPILL) == 0) fail("a buffer registered with NCCL was spilled");
  check_nccl(n.dereg(comm, handle), "ncclCommDeregister");
  spill_all({c});
  expect(c, 3, "a buffer spilled after its registration ended");

  for (CUdeviceptr p : {a, b, c}) check(cuMemFree_v2(p), "cuMemFree");
  check_nccl(n.destroy(comm), "ncclCommDestroy");
  std::printf("NCCL through %s: collectives saw their spilled buffers; pending and registered ones stayed\n",
              path.c_str());
  return 0;
}
