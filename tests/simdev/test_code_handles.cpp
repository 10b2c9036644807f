// simdev's own answers where the driver documents nothing: a CUkernel is not
// a CUfunction to the CUfunction queries, and handles of unloaded code are
// invalid handles.
#include "simdev_test.h"

namespace {

CUresult load_library(CUlibrary* lib) {
  return cuLibraryLoadData(lib, contract::kernels_image(), nullptr, nullptr, 0, nullptr, nullptr, 0);
}

}  // namespace

TEST_F(SimdevTest, AKernelIsNotAFunctionToTheFunctionQueries) {
  CUlibrary lib = nullptr;
  ASSERT_CU(load_library(&lib));
  CUkernel k = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&k, lib, contract::kFillU32));
  size_t offset = 0, size = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, cuFuncGetParamInfo(reinterpret_cast<CUfunction>(k), 0, &offset, &size));
  const char* name = nullptr;
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, cuFuncGetName(&name, reinterpret_cast<CUfunction>(k)));
  // Nor is a CUfunction a CUkernel.
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE,
            cuKernelGetParamInfo(reinterpret_cast<CUkernel>(kernels().fill_u32), 0, &offset, &size));
  EXPECT_CU(cuLibraryUnload(lib));
}

TEST_F(SimdevTest, HandlesOfUnloadedCodeAreInvalid) {
  CUmodule m = nullptr;
  ASSERT_CU(load_any_module(&m));
  CUfunction f = nullptr;
  ASSERT_CU(cuModuleGetFunction(&f, m, contract::kFillU32));
  ASSERT_CU(cuModuleUnload(m));
  size_t offset = 0, size = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, cuFuncGetParamInfo(f, 0, &offset, &size));
  contract::DeviceBuffer d(4096);
  ASSERT_CU(d.status());
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, contract::launch(f, nullptr, 16, d.ptr(), 1u, uint64_t{16}));

  CUlibrary lib = nullptr;
  ASSERT_CU(load_library(&lib));
  CUkernel k = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&k, lib, contract::kFillU32));
  CUfunction kf = nullptr;
  ASSERT_CU(cuKernelGetFunction(&kf, k));
  ASSERT_CU(cuLibraryUnload(lib));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, cuKernelGetParamInfo(k, 0, &offset, &size));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, cuFuncGetParamInfo(kf, 0, &offset, &size));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE,
            contract::launch(reinterpret_cast<CUfunction>(k), nullptr, 16, d.ptr(), 1u, uint64_t{16}));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, contract::launch(kf, nullptr, 16, d.ptr(), 1u, uint64_t{16}));
  ASSERT_CU(cuCtxSynchronize());
}
