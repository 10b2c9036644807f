// Several devices and peer access: kernels run on their stream's device;
// cuMemAlloc memory of another device is readable only after
// cuCtxEnablePeerAccess; a VMM mapping only by the devices cuMemSetAccess
// named, whatever peer access says. Skipped with fewer than two devices.
#include <vector>

#include "contract.h"

namespace {

using contract::child_fail;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kBytes = 2 * kMiB;  // one granule
constexpr uint64_t kWords = kBytes / 4;

class PeerTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    int n = 0;
    ASSERT_CU(cuDeviceGetCount(&n));
    if (n < 2) GTEST_SKIP() << "needs two devices";
    ASSERT_CU(cuDeviceGet(&dev1_, 1));
    int can = 0;
    ASSERT_CU(cuDeviceCanAccessPeer(&can, dev1_, device()));
    peer_supported_ = can != 0;
    ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx1_, dev1_));
    ASSERT_CU(cuCtxPushCurrent(ctx1_));
    ASSERT_CU(cuModuleLoadData(&module1_, contract::kernels_image()));
    ASSERT_CU(cuModuleGetFunction(&sum1_, module1_, contract::kSumU32));
    ASSERT_CU(cuModuleGetFunction(&fill1_, module1_, contract::kFillU32));
    ASSERT_CU(cuCtxPopCurrent(nullptr));
  }
  void TearDown() override {
    if (ctx1_) {
      cuCtxPushCurrent(ctx1_);
      cuCtxDisablePeerAccess(context());  // may not be enabled
      if (module1_) cuModuleUnload(module1_);
      cuCtxPopCurrent(nullptr);
      cuDevicePrimaryCtxRelease(dev1_);
    }
    DriverTest::TearDown();
  }

  // The sum of n words at p, read by a kernel on device 1 (ctx1 current).
  CUresult sum_on_device1(CUdeviceptr p, uint64_t n, uint64_t* out) {
    CUdeviceptr acc = 0;
    if (CUresult e = cuMemAlloc(&acc, sizeof(uint64_t))) return e;
    CUresult e = cuMemsetD8(acc, 0, sizeof(uint64_t));
    if (!e) e = contract::sum_u32(kernels1(), nullptr, p, n, acc);
    if (!e) e = cuCtxSynchronize();
    if (!e) e = cuMemcpyDtoH(out, acc, sizeof *out);
    cuMemFree(acc);
    return e;
  }
  contract::Kernels kernels1() const {
    contract::Kernels k;
    k.sum_u32 = sum1_;
    k.fill_u32 = fill1_;
    return k;
  }

  CUdevice dev1_ = 0;
  CUcontext ctx1_ = nullptr;
  CUmodule module1_ = nullptr;
  CUfunction sum1_ = nullptr, fill1_ = nullptr;
  bool peer_supported_ = false;
};

// Device 0 memory mapped with VMM, readable and writable by device 0 only.
struct VmmRange {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle handle = 0;
  CUresult create(CUdevice owner) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = owner;
    if (CUresult e = cuMemCreate(&handle, kBytes, &prop, 0)) return e;
    if (CUresult e = cuMemAddressReserve(&va, kBytes, 0, 0, 0)) return e;
    if (CUresult e = cuMemMap(va, kBytes, 0, handle, 0)) return e;
    return grant(owner);
  }
  CUresult grant(CUdevice dev) const {
    CUmemAccessDesc d{};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return cuMemSetAccess(va, kBytes, &d, 1);
  }
  ~VmmRange() {
    if (va) {
      cuMemUnmap(va, kBytes);
      cuMemAddressFree(va, kBytes);
    }
    if (handle) cuMemRelease(handle);
  }
};

TEST_F(PeerTest, EveryDeviceHasItsOwnContextAndBusId) {
  CUdevice d = -1;
  ASSERT_CU(cuCtxPushCurrent(ctx1_));
  EXPECT_CU(cuCtxGetDevice(&d));
  EXPECT_EQ(dev1_, d);
  ASSERT_CU(cuCtxPopCurrent(nullptr));
  EXPECT_NE(context(), ctx1_);
  int bus0 = -1, bus1 = -1;
  ASSERT_CU(cuDeviceGetAttribute(&bus0, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device()));
  ASSERT_CU(cuDeviceGetAttribute(&bus1, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev1_));
  EXPECT_NE(bus0, bus1);
}

TEST_F(PeerTest, ALaunchOnAStreamOfAnotherContextIsRefused) {
  contract::Stream s0;  // in device 0's context
  ASSERT_CU(s0.status());
  CUdeviceptr p = 0;
  ASSERT_CU(cuCtxPushCurrent(ctx1_));
  ASSERT_CU(cuMemAlloc(&p, kBytes));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, contract::fill_u32(kernels1(), s0, p, 1u, kWords));
  EXPECT_CU(cuMemFree(p));
  ASSERT_CU(cuCtxPopCurrent(nullptr));
}

TEST_F(PeerTest, RecordingAnEventOnAStreamOfAnotherContextIsRefused) {
  contract::Event e0;  // in device 0's context
  ASSERT_CU(e0.status());
  ASSERT_CU(cuCtxPushCurrent(ctx1_));
  CUstream s1 = nullptr;
  ASSERT_CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, cuEventRecord(e0, s1));
  EXPECT_CU(cuStreamDestroy(s1));
  ASSERT_CU(cuCtxPopCurrent(nullptr));
}

TEST_F(PeerTest, AStreamWaitsForAnEventOfAnotherDevice) {
  contract::DeviceBuffer src(kBytes);
  ASSERT_CU(src.status());
  contract::Stream s0;
  contract::Event done;
  contract::Gate gate;
  ASSERT_CU(s0.status());
  ASSERT_CU(done.status());
  ASSERT_CU(gate.enqueue(s0));  // device 0 holds its fill until the wait is queued
  ASSERT_CU(contract::fill_u32(kernels(), s0, src.ptr(), 7u, kWords));
  ASSERT_CU(cuEventRecord(done, s0));
  ASSERT_CU(cuCtxPushCurrent(ctx1_));
  CUstream s1 = nullptr;
  CUdeviceptr dst = 0;
  ASSERT_CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuMemAlloc(&dst, kBytes));
  ASSERT_CU(cuStreamWaitEvent(s1, done, 0));
  // A copy between devices needs no peer access: the driver stages it.
  ASSERT_CU(cuMemcpyPeerAsync(dst, ctx1_, src.ptr(), context(), kBytes, s1));
  gate.open();
  ASSERT_CU(cuStreamSynchronize(s1));
  std::vector<uint32_t> host(kWords);
  ASSERT_CU(cuMemcpyDtoH(host.data(), dst, kBytes));
  EXPECT_EQ(7u, host.front());
  EXPECT_EQ(7u, host.back());
  EXPECT_CU(cuMemFree(dst));
  EXPECT_CU(cuStreamDestroy(s1));
  ASSERT_CU(cuCtxPopCurrent(nullptr));
}

TEST_F(PeerTest, PeerAccessErrors) {
  if (!peer_supported_) GTEST_SKIP() << "no peer access between devices 0 and 1";
  ASSERT_CU(cuCtxPushCurrent(ctx1_));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuCtxEnablePeerAccess(context(), 1));
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, cuCtxEnablePeerAccess(ctx1_, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, cuCtxEnablePeerAccess(nullptr, 0));
  EXPECT_EQ(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, cuCtxDisablePeerAccess(context()));
  EXPECT_CU(cuCtxEnablePeerAccess(context(), 0));
  EXPECT_EQ(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, cuCtxEnablePeerAccess(context(), 0));
  EXPECT_CU(cuCtxDisablePeerAccess(context()));
  ASSERT_CU(cuCtxPopCurrent(nullptr));
}

TEST_F(PeerTest, SetAccessForADeviceThatDoesNotExistIsAnInvalidDevice) {
  int n = 0;
  ASSERT_CU(cuDeviceGetCount(&n));
  VmmRange r;
  ASSERT_CU(r.create(device()));
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, r.grant(n));
}

TEST_F(PeerTest, MemAllocMemoryIsReadableFromAPeerOnceAccessIsEnabled) {
  if (!peer_supported_) GTEST_SKIP() << "no peer access between devices 0 and 1";
  contract::DeviceBuffer on0(kBytes);
  ASSERT_CU(on0.status());
  ASSERT_CU(contract::fill_u32(kernels(), nullptr, on0.ptr(), 3u, kWords));
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuCtxPushCurrent(ctx1_));
  ASSERT_CU(cuCtxEnablePeerAccess(context(), 0));
  uint64_t sum = 0;
  EXPECT_CU(sum_on_device1(on0.ptr(), kWords, &sum));
  EXPECT_EQ(3 * kWords, sum);
  ASSERT_CU(cuCtxPopCurrent(nullptr));
}

TEST_F(PeerTest, AVmmMappingIsReadableFromAPeerOnlyOnceSetAccessGrantsIt) {
  if (!peer_supported_) GTEST_SKIP() << "no peer access between devices 0 and 1";
  VmmRange r;
  ASSERT_CU(r.create(device()));
  ASSERT_CU(contract::fill_u32(kernels(), nullptr, r.va, 5u, kWords));
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(r.grant(dev1_));
  ASSERT_CU(cuCtxPushCurrent(ctx1_));
  uint64_t sum = 0;
  EXPECT_CU(sum_on_device1(r.va, kWords, &sum));
  EXPECT_EQ(5 * kWords, sum);
  ASSERT_CU(cuCtxPopCurrent(nullptr));
}

// The trap: peer access does not extend to VMM mappings. The fault poisons
// the process, so it runs in a child.
TEST_F(PeerTest, PeerAccessDoesNotOpenAVmmMappingToThePeer) {
  if (!peer_supported_) GTEST_SKIP() << "no peer access between devices 0 and 1";
  contract::expect_child_returns_zero([&] {
    VmmRange r;
    if (CUresult e = r.create(device())) return child_fail(10, "mapping on device 0", e, CUDA_SUCCESS);
    if (CUresult e = cuCtxPushCurrent(ctx1_)) return child_fail(11, "cuCtxPushCurrent", e, CUDA_SUCCESS);
    if (CUresult e = cuCtxEnablePeerAccess(context(), 0))
      return child_fail(12, "cuCtxEnablePeerAccess", e, CUDA_SUCCESS);
    uint64_t sum = 0;
    CUresult e = sum_on_device1(r.va, kWords, &sum);
    if (e != CUDA_ERROR_ILLEGAL_ADDRESS) return child_fail(13, "device 1 reading the mapping", e, CUDA_ERROR_ILLEGAL_ADDRESS);
    return 0;
  });
}

TEST_F(PeerTest, MemAllocMemoryOfAnotherDeviceFaultsWithoutPeerAccess) {
  contract::expect_child_returns_zero([&] {
    CUdeviceptr p = 0;
    if (CUresult e = cuMemAlloc(&p, kBytes)) return child_fail(10, "cuMemAlloc on device 0", e, CUDA_SUCCESS);
    if (CUresult e = cuCtxPushCurrent(ctx1_)) return child_fail(11, "cuCtxPushCurrent", e, CUDA_SUCCESS);
    uint64_t sum = 0;
    CUresult e = sum_on_device1(p, kWords, &sum);
    if (e != CUDA_ERROR_ILLEGAL_ADDRESS) return child_fail(12, "device 1 reading it", e, CUDA_ERROR_ILLEGAL_ADDRESS);
    return 0;
  });
}

}  // namespace
