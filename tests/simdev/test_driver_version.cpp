// SIMDEV_DRIVER_VERSION makes simdev an older driver: cuDriverGetVersion
// reports it, and entry points that came later are absent from
// cuGetProcAddress (CUDA_ERROR_NOT_FOUND, a null pointer, status
// SYMBOL_NOT_FOUND) and answer CUDA_ERROR_NOT_FOUND when called anyway.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "simdev_test.h"

namespace {

int driver_version() {
  int v = 0;
  EXPECT_CU(cuDriverGetVersion(&v));
  return v;
}

void expect_absent(const char* symbol, int version) {
  void* pfn = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND, cuGetProcAddress(symbol, &pfn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status))
      << symbol;
  EXPECT_EQ(nullptr, pfn) << symbol;
  EXPECT_EQ(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, status) << symbol;
}

void expect_present(const char* symbol, int version) {
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  EXPECT_CU(cuGetProcAddress(symbol, &pfn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status)) << symbol;
  EXPECT_NE(nullptr, pfn) << symbol;
  EXPECT_EQ(CU_GET_PROC_ADDRESS_SUCCESS, status) << symbol;
}

}  // namespace

TEST_F(SimdevTest, DriverVersionIsTheToolkitsByDefault) {
  if (!env_or_empty("SIMDEV_DRIVER_VERSION").empty()) GTEST_SKIP() << "SIMDEV_DRIVER_VERSION is set";
  EXPECT_EQ(CUDA_VERSION, driver_version());
  expect_present("cuFuncGetParamInfo", CUDA_VERSION);
  expect_present("cuKernelGetParamInfo", CUDA_VERSION);
}

// SIMDEV_DRIVER_VERSION=12030: before the parameter queries (12.4).
TEST_F(SimdevTest, Env_DriverVersion12030LacksTheParameterQueries) {
  ASSERT_EQ(12030, driver_version());
  expect_absent("cuFuncGetParamInfo", 12030);
  expect_absent("cuKernelGetParamInfo", 12030);
  expect_present("cuLibraryLoadData", 12030);
  expect_present("cuFuncGetName", 12030);
  expect_present("cuMemAlloc", 12030);
  // Versions above the driver's are refused, as before.
  void* pfn = nullptr;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress("cuMemAlloc", &pfn, 12040, 0, nullptr));
  // Bound anyway (the exported name still exists): not found.
  size_t offset = 0, size = 0;
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND, cuFuncGetParamInfo(kernels().fill_u32, 0, &offset, &size));
  // Everything older works.
  contract::DeviceBuffer d(4096);
  ASSERT_CU(d.status());
  ASSERT_CU(contract::fill_u32(kernels(), nullptr, d.ptr(), 3u, 1024));
  ASSERT_CU(cuCtxSynchronize());
}

// SIMDEV_DRIVER_VERSION=11080: before libraries (12.0).
TEST_F(SimdevTest, Env_DriverVersion11080LacksLibraries) {
  ASSERT_EQ(11080, driver_version());
  for (const char* symbol : {"cuLibraryLoadData", "cuLibraryGetKernel", "cuKernelGetFunction", "cuLibraryUnload",
                             "cuFuncGetParamInfo", "cuKernelGetParamInfo", "cuFuncGetName"})
    expect_absent(symbol, 11080);
  expect_present("cuLaunchKernelEx", 11080);
  expect_present("cuOccupancyMaxPotentialBlockSize", 11080);
  CUlibrary lib = nullptr;
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND,
            cuLibraryLoadData(&lib, contract::kernels_image(), nullptr, nullptr, 0, nullptr, nullptr, 0));
}

// A malformed SIMDEV_DRIVER_VERSION: cuInit fails after one line naming it.
TEST(SimdevDriverVersion, Env_MalformedValueFailsCuInit) {
  if (!simdev_present()) GTEST_SKIP() << "libcuda.so.1 is not simdev";
  const std::string value = env_or_empty("SIMDEV_DRIVER_VERSION");
  ASSERT_FALSE(value.empty());
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(cuInit(0) == CUDA_ERROR_INVALID_VALUE ? 0 : 1), ::testing::ExitedWithCode(0),
              "^simdev: SIMDEV_DRIVER_VERSION=\"" + value + "\" is not valid; expected [^\n]*\n$");
}
