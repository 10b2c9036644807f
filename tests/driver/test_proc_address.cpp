// cuGetProcAddress_v2: versioned names, per-thread default stream variants,
// and the answers for unknown symbols and insufficient versions.
#include <dlfcn.h>

#include <algorithm>

#include "contract.h"

namespace {

class ProcAddressTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    if (HasFatalFailure()) return;
    lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(nullptr, lib_) << "libcuda.so.1 is not loaded";
    ASSERT_CU(cuDriverGetVersion(&driver_version_));
    // Asking for a version above the driver's is an error, so ask for 13.0
    // or the driver's own version, whichever is lower.
    version_ = std::min(13000, driver_version_);
  }
  void TearDown() override {
    if (lib_) dlclose(lib_);
    DriverTest::TearDown();
  }

  void* exported(const char* name) const { return dlsym(lib_, name); }

  // The address cuGetProcAddress gives for symbol, checking it reports success.
  void* lookup(const char* symbol, int version, cuuint64_t flags) {
    void* pfn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_CU(cuGetProcAddress(symbol, &pfn, version, flags, &status)) << symbol;
    EXPECT_EQ(CU_GET_PROC_ADDRESS_SUCCESS, status) << symbol;
    EXPECT_NE(nullptr, pfn) << symbol;
    return pfn;
  }

  void* lib_ = nullptr;
  int driver_version_ = 0;
  int version_ = 0;
};

}  // namespace

TEST_F(ProcAddressTest, VersionedNamesResolveToTheLatestAbi) {
  ASSERT_NE(nullptr, exported("cuMemAlloc_v2"));
  EXPECT_EQ(exported("cuMemAlloc_v2"), lookup("cuMemAlloc", version_, CU_GET_PROC_ADDRESS_DEFAULT));
  EXPECT_EQ(exported("cuMemFree_v2"), lookup("cuMemFree", version_, CU_GET_PROC_ADDRESS_DEFAULT));
  EXPECT_EQ(exported("cuMemGetInfo_v2"),
            lookup("cuMemGetInfo", version_, CU_GET_PROC_ADDRESS_DEFAULT));
  EXPECT_EQ(exported("cuMemcpyHtoD_v2"),
            lookup("cuMemcpyHtoD", version_, CU_GET_PROC_ADDRESS_DEFAULT));
  EXPECT_EQ(exported("cuMemHostRegister_v2"),
            lookup("cuMemHostRegister", version_, CU_GET_PROC_ADDRESS_DEFAULT));
  EXPECT_EQ(exported("cuGetProcAddress_v2"),
            lookup("cuGetProcAddress", version_, CU_GET_PROC_ADDRESS_DEFAULT));
  // Unversioned names resolve to themselves.
  EXPECT_EQ(exported("cuMemCreate"), lookup("cuMemCreate", version_, CU_GET_PROC_ADDRESS_DEFAULT));
  EXPECT_EQ(exported("cuLaunchKernel"),
            lookup("cuLaunchKernel", version_, CU_GET_PROC_ADDRESS_DEFAULT));
}

TEST_F(ProcAddressTest, OldVersionsGetTheOldAbi) {
  void* v1 = exported("cuMemAlloc");
  ASSERT_NE(nullptr, v1);
  EXPECT_NE(exported("cuMemAlloc_v2"), v1);
  EXPECT_EQ(v1, lookup("cuMemAlloc", 3000, CU_GET_PROC_ADDRESS_DEFAULT));
  EXPECT_EQ(exported("cuMemAlloc_v2"), lookup("cuMemAlloc", 3020, CU_GET_PROC_ADDRESS_DEFAULT));
}

TEST_F(ProcAddressTest, PerThreadDefaultStreamFlagGivesPtszForms) {
  const auto ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  ASSERT_NE(nullptr, exported("cuStreamSynchronize_ptsz"));
  EXPECT_EQ(exported("cuStreamSynchronize_ptsz"), lookup("cuStreamSynchronize", version_, ptds));
  EXPECT_EQ(exported("cuMemcpyHtoDAsync_v2_ptsz"), lookup("cuMemcpyHtoDAsync", version_, ptds));
  EXPECT_EQ(exported("cuMemcpyHtoD_v2_ptds"), lookup("cuMemcpyHtoD", version_, ptds));
  EXPECT_EQ(exported("cuLaunchKernel_ptsz"), lookup("cuLaunchKernel", version_, ptds));
  EXPECT_EQ(exported("cuMemAllocAsync_ptsz"), lookup("cuMemAllocAsync", version_, ptds));
  // No per-thread form: the legacy function.
  EXPECT_EQ(exported("cuMemAlloc_v2"), lookup("cuMemAlloc", version_, ptds));
}

TEST_F(ProcAddressTest, DefaultAndLegacyFlagsGiveLegacyForms) {
  for (auto flags : {CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_LEGACY_STREAM}) {
    EXPECT_EQ(exported("cuStreamSynchronize"), lookup("cuStreamSynchronize", version_, flags));
    EXPECT_EQ(exported("cuMemcpyHtoDAsync_v2"), lookup("cuMemcpyHtoDAsync", version_, flags));
  }
}

TEST_F(ProcAddressTest, TooLowVersionIsVersionNotSufficient) {
  void* pfn = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  const CUresult r =
      cuGetProcAddress("cuLibraryLoadData", &pfn, 11000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  // Documented as CUDA_SUCCESS with a NULL pointer; drivers also answer NOT_FOUND.
  EXPECT_TRUE(r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_FOUND) << ::testing::PrintToString(r);
  EXPECT_EQ(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, status);
  EXPECT_EQ(nullptr, pfn);
}

TEST_F(ProcAddressTest, UnknownSymbolIsSymbolNotFound) {
  void* pfn = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  const CUresult r =
      cuGetProcAddress("cuNoSuchFunction", &pfn, version_, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  EXPECT_TRUE(r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_FOUND) << ::testing::PrintToString(r);
  EXPECT_EQ(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, status);
  EXPECT_EQ(nullptr, pfn);
}

TEST_F(ProcAddressTest, VersionAboveTheDriversIsInvalidValue) {
  void* pfn = nullptr;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress("cuMemAlloc", &pfn, driver_version_ + 10,
                                                       CU_GET_PROC_ADDRESS_DEFAULT, nullptr));
}

TEST_F(ProcAddressTest, ResolvedFunctionsWork) {
  using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
  using FreeFn = CUresult (*)(CUdeviceptr);
  using SyncFn = CUresult (*)(CUstream);
  auto alloc = reinterpret_cast<AllocFn>(lookup("cuMemAlloc", version_, 0));
  auto release = reinterpret_cast<FreeFn>(lookup("cuMemFree", version_, 0));
  auto sync = reinterpret_cast<SyncFn>(
      lookup("cuStreamSynchronize", version_, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
  ASSERT_TRUE(alloc && release && sync);
  CUdeviceptr p = 0;
  ASSERT_CU(alloc(&p, 1 << 20));
  ASSERT_CU(cuMemsetD8Async(p, 1, 1 << 20, CU_STREAM_PER_THREAD));
  EXPECT_CU(sync(nullptr));  // the per-thread default stream
  EXPECT_CU(release(p));
}
