// Fault injection: simdev_inject_fault and SIMDEV_FAIL make the Nth call of a
// function fail once, with a documented error, and the calls after it succeed.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "simdev_test.h"

using contract::DeviceBuffer;
using contract::Stream;

namespace {
constexpr size_t kMiB = size_t{1} << 20;
}

TEST_F(SimdevTest, InjectedFaultHitsTheNthCallOnly) {
  ASSERT_EQ(0, sim().inject_fault("cuMemAlloc_v2", 2, 0));
  CUdeviceptr a = 0, b = 0, c = 0;
  EXPECT_CU(cuMemAlloc(&a, kMiB));
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&b, kMiB));  // cuMemAlloc's resource error
  EXPECT_CU(cuMemAlloc(&c, kMiB));
  EXPECT_CU(cuMemAlloc(&b, kMiB));
  for (CUdeviceptr p : {a, b, c}) {
    if (p) {
      EXPECT_CU(cuMemFree(p));
    }
  }
}

TEST_F(SimdevTest, InjectedFaultIsNotSticky) {
  ASSERT_EQ(0, sim().inject_fault("cuMemAlloc_v2", 1, 0));
  CUdeviceptr p = 0;
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, kMiB));
  EXPECT_CU(cuCtxSynchronize());
  DeviceBuffer d(kMiB);
  EXPECT_CU(d.status());
}

TEST_F(SimdevTest, InjectedFaultWithAnExplicitError) {
  DeviceBuffer d(kMiB);
  ASSERT_CU(d.status());
  ASSERT_EQ(0, sim().inject_fault("cuMemsetD8_v2", 1, CUDA_ERROR_INVALID_VALUE));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemsetD8(d.ptr(), 1, kMiB));
  EXPECT_CU(cuMemsetD8(d.ptr(), 1, kMiB));
}

TEST_F(SimdevTest, InjectedFaultOnPhysicalAllocation) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device();
  size_t g = 0;
  ASSERT_CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  ASSERT_EQ(0, sim().inject_fault("cuMemCreate", 3, 0));
  std::vector<CUmemGenericAllocationHandle> handles;
  std::vector<CUresult> results;
  for (int i = 0; i < 4; ++i) {
    CUmemGenericAllocationHandle h = 0;
    results.push_back(cuMemCreate(&h, g, &prop, 0));
    if (results.back() == CUDA_SUCCESS) handles.push_back(h);
  }
  EXPECT_CU(results[0]);
  EXPECT_CU(results[1]);
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, results[2]);
  EXPECT_CU(results[3]);
  for (auto h : handles) EXPECT_CU(cuMemRelease(h));
}

TEST_F(SimdevTest, InjectedFaultOnAsyncCopy) {
  Stream s;
  ASSERT_CU(s.status());
  DeviceBuffer d(kMiB);
  ASSERT_CU(d.status());
  std::vector<unsigned char> host(kMiB, 0);
  ASSERT_EQ(0, sim().inject_fault("cuMemcpyDtoHAsync_v2", 1, 0));
  EXPECT_NE(CUDA_SUCCESS, cuMemcpyDtoHAsync(host.data(), d.ptr(), kMiB, s));
  EXPECT_CU(cuMemcpyDtoHAsync(host.data(), d.ptr(), kMiB, s));
  EXPECT_CU(cuStreamSynchronize(s));
}

// A graph launch is one driver call: its kernel nodes do not count as
// cuLaunchKernel calls, so a fault armed there neither fails the graph
// launch (which documents no launch-resource error) nor is used up by it.
TEST_F(SimdevTest, GraphKernelNodesAreNotCountedAsLaunches) {
  Stream s;
  ASSERT_CU(s.status());
  DeviceBuffer d(kMiB);
  ASSERT_CU(d.status());
  CUdeviceptr ptr = d.ptr();
  uint64_t n = kMiB / 4;
  void* params[] = {&ptr, &n};
  CUDA_KERNEL_NODE_PARAMS k{};
  k.func = kernels().add_one_u32;
  k.gridDimX = contract::blocks_for(n);
  k.gridDimY = k.gridDimZ = 1;
  k.blockDimX = 256;
  k.blockDimY = k.blockDimZ = 1;
  k.kernelParams = params;
  CUgraph g = nullptr;
  CUgraphNode node = nullptr;
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphCreate(&g, 0));
  ASSERT_CU(cuGraphAddKernelNode(&node, g, nullptr, 0, &k));
  ASSERT_CU(cuGraphInstantiate(&exec, g, 0));
  ASSERT_EQ(0, sim().inject_fault("cuLaunchKernel", 1, 0));
  EXPECT_CU(cuGraphLaunch(exec, s));
  EXPECT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, contract::add_one_u32(kernels(), s, ptr, n));
  EXPECT_CU(contract::add_one_u32(kernels(), s, ptr, n));
  EXPECT_CU(cuStreamSynchronize(s));
  EXPECT_CU(cuGraphExecDestroy(exec));
  EXPECT_CU(cuGraphDestroy(g));
}

TEST_F(SimdevTest, CallsThroughGetProcAddressAreCounted) {
  void* pfn = nullptr;
  ASSERT_CU(cuGetProcAddress("cuMemAlloc", &pfn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
  auto alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(pfn);
  ASSERT_EQ(0, sim().inject_fault("cuMemAlloc_v2", 1, 0));
  CUdeviceptr p = 0;
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, alloc(&p, kMiB));
  ASSERT_CU(alloc(&p, kMiB));
  EXPECT_CU(cuMemFree(p));
}

TEST_F(SimdevTest, ClearFaultsDisarms) {
  ASSERT_EQ(0, sim().inject_fault("cuMemAlloc_v2", 1, 0));
  sim().clear_faults();
  DeviceBuffer d(kMiB);
  EXPECT_CU(d.status());
}

TEST_F(SimdevTest, UnknownFunctionNameIsRejected) {
  EXPECT_EQ(-1, sim().inject_fault("cuNoSuchFunction", 1, 0));
  EXPECT_EQ(-1, sim().inject_fault("cuMemAlloc_v2", 0, 0));  // calls count from 1
}

// A pause holds the nth call, before it does anything, until released; the
// calls before it and after it go through.
TEST_F(SimdevTest, PausedCallWaitsForTheRelease) {
  ASSERT_EQ(0, sim().inject_pause("cuMemAlloc_v2", 2));
  CUdeviceptr a = 0, b = 0;
  EXPECT_CU(cuMemAlloc(&a, kMiB));  // the first call: not held
  EXPECT_EQ(0, sim().wait_paused(0));
  std::atomic<bool> returned{false};
  CUresult held = CUDA_ERROR_UNKNOWN;
  std::thread t([&] {
    cuCtxSetCurrent(context());
    held = cuMemAlloc(&b, kMiB);
    returned = true;
  });
  ASSERT_EQ(1, sim().wait_paused(10'000));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(returned.load()) << "the held call returned before its release";
  CUdeviceptr c = 0;
  EXPECT_CU(cuMemAlloc(&c, kMiB));  // other calls go on meanwhile
  sim().release_pauses();
  t.join();
  EXPECT_CU(held);
  EXPECT_EQ(0, sim().wait_paused(0));
  for (CUdeviceptr p : {a, b, c}) {
    if (p) {
      EXPECT_CU(cuMemFree(p));
    }
  }
}

TEST_F(SimdevTest, PauseOfAnUnknownFunctionIsRejected) {
  EXPECT_EQ(-1, sim().inject_pause("cuNoSuchFunction", 1));
}

// Runs only under the meson entry that sets
// SIMDEV_FAIL="cuMemAlloc_v2:2,cuMemcpyDtoHAsync_v2:1"; counts are from
// process start, so this must be the only test in its process.
TEST_F(SimdevTest, Env_SimdevFailArmsFaultsAtStart) {
  if (env_or_empty("SIMDEV_FAIL") != "cuMemAlloc_v2:2,cuMemcpyDtoHAsync_v2:1")
    GTEST_SKIP() << "needs SIMDEV_FAIL=cuMemAlloc_v2:2,cuMemcpyDtoHAsync_v2:1";
  CUdeviceptr a = 0, b = 0;
  EXPECT_CU(cuMemAlloc(&a, kMiB));
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&b, kMiB));
  EXPECT_CU(cuMemAlloc(&b, kMiB));
  Stream s;
  ASSERT_CU(s.status());
  std::vector<unsigned char> host(kMiB);
  EXPECT_NE(CUDA_SUCCESS, cuMemcpyDtoHAsync(host.data(), a, kMiB, s));
  EXPECT_CU(cuMemcpyDtoHAsync(host.data(), a, kMiB, s));
  EXPECT_CU(cuStreamSynchronize(s));
  EXPECT_CU(cuMemFree(a));
  EXPECT_CU(cuMemFree(b));
}
