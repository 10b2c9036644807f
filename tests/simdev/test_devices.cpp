// SIMDEV_DEVICES, SIMDEV_PEER_ACCESS and a SIMDEV_HOST_NUMA_ID list: each
// device has its own memory and attributes; peer access can be withheld.
#include "simdev_test.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Device `dev`'s primary context, current while the object lives.
class OnDevice {
 public:
  explicit OnDevice(CUdevice dev) : dev_(dev) {
    status_ = cuDevicePrimaryCtxRetain(&ctx_, dev);
    if (!status_) status_ = cuCtxPushCurrent(ctx_);
  }
  ~OnDevice() {
    if (ctx_) {
      cuCtxPopCurrent(nullptr);
      cuDevicePrimaryCtxRelease(dev_);
    }
  }
  CUresult status() const { return status_; }
  CUcontext context() const { return ctx_; }

 private:
  CUdevice dev_;
  CUcontext ctx_ = nullptr;
  CUresult status_ = CUDA_ERROR_NOT_INITIALIZED;
};

size_t free_on_current() {
  size_t f = 0, t = 0;
  EXPECT_CU(cuMemGetInfo(&f, &t));
  return f;
}

TEST_F(SimdevTest, Env_DevicesEachHaveTheirOwnMemory) {
  int n = 0;
  ASSERT_CU(cuDeviceGetCount(&n));
  ASSERT_EQ(2, n);
  size_t total0 = 0, total1 = 0;
  ASSERT_CU(cuDeviceTotalMem(&total0, 0));
  ASSERT_CU(cuDeviceTotalMem(&total1, 1));
  EXPECT_EQ(total0, total1);  // SIMDEV_MEM applies to each
  const size_t free0 = free_on_current();
  OnDevice d1(1);
  ASSERT_CU(d1.status());
  const size_t free1 = free_on_current();
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, 64 * kMiB));  // on device 1
  EXPECT_LE(free_on_current(), free1 - 64 * kMiB);
  ASSERT_CU(cuCtxPopCurrent(nullptr));
  EXPECT_EQ(free0, free_on_current());  // device 0 untouched
  ASSERT_CU(cuCtxPushCurrent(d1.context()));
  EXPECT_CU(cuMemFree(p));
  EXPECT_EQ(free1, free_on_current());
}

TEST_F(SimdevTest, Env_DevicesEachHaveTheirOwnCapacity) {
  // Filling device 1 leaves device 0's capacity whole.
  size_t total = 0;
  ASSERT_CU(cuDeviceTotalMem(&total, 1));
  OnDevice d1(1);
  ASSERT_CU(d1.status());
  CUdeviceptr full = 0, more = 0;
  ASSERT_CU(cuMemAlloc(&full, total - 4 * kMiB));
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&more, 64 * kMiB));
  ASSERT_CU(cuCtxPopCurrent(nullptr));
  CUdeviceptr on0 = 0;
  EXPECT_CU(cuMemAlloc(&on0, 64 * kMiB));
  EXPECT_CU(cuMemFree(on0));
  ASSERT_CU(cuCtxPushCurrent(d1.context()));
  EXPECT_CU(cuMemFree(full));
}

TEST_F(SimdevTest, Env_DevicesHostNumaIdsComeFromTheList) {
  int a = -2, b = -2;
  ASSERT_CU(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0));
  ASSERT_CU(cuDeviceGetAttribute(&b, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 1));
  EXPECT_EQ(0, a);
  EXPECT_EQ(1, b);
  int bad = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetAttribute(&bad, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 2));
}

TEST_F(SimdevTest, Env_NoPeerAccessRefusesEnabling) {
  int can = 1;
  ASSERT_CU(cuDeviceCanAccessPeer(&can, 1, 0));
  EXPECT_EQ(0, can);
  ASSERT_CU(cuDeviceGetP2PAttribute(&can, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1, 0));
  EXPECT_EQ(0, can);
  CUcontext ctx0 = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&ctx0));
  OnDevice d1(1);
  ASSERT_CU(d1.status());
  EXPECT_EQ(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, cuCtxEnablePeerAccess(ctx0, 0));
}

TEST(SimdevDevices, Env_MalformedDevicesFailsCuInit) {
  if (!simdev_present()) GTEST_SKIP() << "libcuda.so.1 is not simdev";
  const std::string value = env_or_empty("SIMDEV_DEVICES");
  ASSERT_FALSE(value.empty());
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(cuInit(0) == CUDA_ERROR_INVALID_VALUE ? 0 : 1), ::testing::ExitedWithCode(0),
              "^simdev: SIMDEV_DEVICES=\"" + value + "\" is not valid; expected [^\n]*\n$");
}

}  // namespace
