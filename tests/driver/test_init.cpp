// Initialisation, versions, devices, attributes, contexts, error names.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "contract.h"

using contract::child_fail;
using contract::expect_child_returns_zero;

// Runs in a fresh process, so nothing has called cuInit there yet.
TEST(DriverInit, CallsBeforeInitReturnNotInitialized) {
  expect_child_returns_zero([] {
    int version = 0;
    CUresult r = cuDriverGetVersion(&version);
    if (r != CUDA_SUCCESS)
      return child_fail(1, "cuDriverGetVersion before cuInit", r, CUDA_SUCCESS);
    int count = 0;
    r = cuDeviceGetCount(&count);
    if (r != CUDA_ERROR_NOT_INITIALIZED)
      return child_fail(2, "cuDeviceGetCount before cuInit", r, CUDA_ERROR_NOT_INITIALIZED);
    CUdeviceptr p = 0;
    r = cuMemAlloc(&p, 4096);
    if (r != CUDA_ERROR_NOT_INITIALIZED)
      return child_fail(3, "cuMemAlloc before cuInit", r, CUDA_ERROR_NOT_INITIALIZED);
    r = cuInit(0);
    if (r != CUDA_SUCCESS) return child_fail(4, "cuInit", r, CUDA_SUCCESS);
    r = cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count < 1) return child_fail(5, "cuDeviceGetCount", r, CUDA_SUCCESS);
    return 0;
  });
}

TEST_F(DriverTest, InitWithNonZeroFlagsIsRejected) {
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuInit(1));
  EXPECT_CU(cuInit(0));  // repeated cuInit(0) is harmless
}

TEST_F(DriverTest, DriverVersionIsAtLeast12) {
  int version = 0;
  ASSERT_CU(cuDriverGetVersion(&version));
  EXPECT_GE(version, 12000);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuDriverGetVersion(nullptr));
}

TEST_F(DriverTest, DevicesEnumerate) {
  int count = 0;
  ASSERT_CU(cuDeviceGetCount(&count));
  ASSERT_GE(count, 1);
  CUdevice d = -1;
  ASSERT_CU(cuDeviceGet(&d, 0));
  EXPECT_EQ(device(), d);
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&d, count));
  char name[256] = {};
  ASSERT_CU(cuDeviceGetName(name, sizeof name, d));
  EXPECT_GT(std::strlen(name), 0u);
  size_t total = 0;
  ASSERT_CU(cuDeviceTotalMem(&total, d));
  EXPECT_GT(total, 0u);
  EXPECT_LE(total_memory(), total);
}

TEST_F(DriverTest, AttributesTierrtReliesOn) {
  EXPECT_EQ(1, attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED));
  EXPECT_EQ(1, attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING));
  EXPECT_EQ(1, attribute(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY));
  EXPECT_EQ(1, attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED));
  EXPECT_EQ(32, attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE));
  EXPECT_GE(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 1);
  EXPECT_GE(attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 1);
  EXPECT_GE(attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 256);
  EXPECT_GE(attribute(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT), 1);
  // 0 or 1; -1 is not a valid answer for these.
  for (auto a : {CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                 CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED}) {
    int v = attribute(a);
    EXPECT_TRUE(v == 0 || v == 1) << "attribute " << a << " = " << v;
  }
  EXPECT_GE(attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID), -1);
}

TEST_F(DriverTest, UnknownAttributeIsInvalidValue) {
  int v = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(100000), device()));
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE,
            cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 1 << 20));
}

TEST_F(DriverTest, PrimaryContextIsSharedAndCurrent) {
  CUcontext again = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&again, device()));
  EXPECT_EQ(context(), again);
  unsigned int flags = 0;
  int active = 0;
  ASSERT_CU(cuDevicePrimaryCtxGetState(device(), &flags, &active));
  EXPECT_EQ(1, active);
  ASSERT_CU(cuDevicePrimaryCtxRelease(device()));

  CUcontext cur = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&cur));
  EXPECT_EQ(context(), cur);
  CUdevice d = -1;
  ASSERT_CU(cuCtxGetDevice(&d));
  EXPECT_EQ(device(), d);
}

TEST_F(DriverTest, ContextPushPop) {
  ASSERT_CU(cuCtxPushCurrent(context()));
  CUcontext popped = nullptr;
  ASSERT_CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(context(), popped);
  CUcontext cur = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&cur));
  EXPECT_EQ(context(), cur);  // the one set before the push is current again
}

TEST_F(DriverTest, NoCurrentContextIsInvalidContext) {
  // A new thread has no current context.
  CUresult alloc = CUDA_SUCCESS, sync = CUDA_SUCCESS, info = CUDA_SUCCESS;
  CUcontext cur = reinterpret_cast<CUcontext>(1);
  CUresult get = CUDA_ERROR_UNKNOWN;
  std::thread t([&] {
    get = cuCtxGetCurrent(&cur);
    CUdeviceptr p = 0;
    alloc = cuMemAlloc(&p, 4096);
    sync = cuCtxSynchronize();
    size_t f = 0, tot = 0;
    info = cuMemGetInfo(&f, &tot);
  });
  t.join();
  EXPECT_CU(get);
  EXPECT_EQ(nullptr, cur);
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, alloc);
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, sync);
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, info);
}

TEST_F(DriverTest, ContextSetOnAnotherThreadWorks) {
  CUresult alloc = CUDA_ERROR_UNKNOWN, freed = CUDA_ERROR_UNKNOWN;
  std::thread t([&] {
    if (cuCtxSetCurrent(context()) != CUDA_SUCCESS) return;
    CUdeviceptr p = 0;
    alloc = cuMemAlloc(&p, 4096);
    if (alloc == CUDA_SUCCESS) freed = cuMemFree(p);
  });
  t.join();
  EXPECT_CU(alloc);
  EXPECT_CU(freed);
}

TEST_F(DriverTest, ErrorNamesAndStrings) {
  const char* s = nullptr;
  ASSERT_CU(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
  ASSERT_NE(nullptr, s);
  EXPECT_STREQ("CUDA_ERROR_OUT_OF_MEMORY", s);
  ASSERT_CU(cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s));
  EXPECT_STREQ("CUDA_ERROR_ILLEGAL_ADDRESS", s);
  ASSERT_CU(cuGetErrorName(CUDA_SUCCESS, &s));
  EXPECT_STREQ("CUDA_SUCCESS", s);
  ASSERT_CU(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
  ASSERT_NE(nullptr, s);
  EXPECT_GT(std::strlen(s), 0u);
  ASSERT_CU(cuGetErrorString(CUDA_SUCCESS, &s));
  EXPECT_STREQ("no error", s);

  s = "unchanged";
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuGetErrorName(static_cast<CUresult>(123456), &s));
  EXPECT_EQ(nullptr, s);
  s = "unchanged";
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuGetErrorString(static_cast<CUresult>(123456), &s));
  EXPECT_EQ(nullptr, s);
}

// CUDA does not survive fork: the child of a process that initialised the
// driver finds it unusable, cuInit included. (The Programming Guide leaves
// this undefined; applications report "initialization error", code 3.)
TEST_F(DriverTest, AForkedChildCannotUseTheDriver) {
  contract::DeviceBuffer parent(1 << 20);
  ASSERT_CU(parent.status());
  ASSERT_CU(cuMemsetD32(parent.ptr(), 7, (1 << 20) / 4));
  ASSERT_CU(cuCtxSynchronize());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    if (cuInit(0) != CUDA_ERROR_NOT_INITIALIZED) code = 1;
    CUdeviceptr p = 0;
    if (code == 0 && cuMemAlloc(&p, 4096) != CUDA_ERROR_NOT_INITIALIZED) code = 2;
    unsigned word = 0;
    if (code == 0 && cuMemcpyDtoH(&word, parent.ptr(), 4) != CUDA_ERROR_NOT_INITIALIZED) code = 3;
    std::_Exit(code);
  }
  int status = 0;
  ASSERT_EQ(child, waitpid(child, &status, 0));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(0, WEXITSTATUS(status)) << "1: cuInit, 2: cuMemAlloc, 3: cuMemcpyDtoH did not fail with NOT_INITIALIZED";
  // The parent's driver is untouched.
  unsigned word = 0;
  ASSERT_CU(cuMemcpyDtoH(&word, parent.ptr(), 4));
  EXPECT_EQ(7u, word);
}
