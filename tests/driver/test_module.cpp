// Modules, libraries, kernels: loading, lookup, parameter layout, launches.
#include <cstring>
#include <vector>

#include "contract.h"

using contract::DeviceBuffer;
using contract::Stream;

namespace {

struct ParamInfo {
  size_t offset, size;
};

// Enumerates parameters until the driver answers CUDA_ERROR_INVALID_VALUE.
template <class Query>
std::vector<ParamInfo> enumerate_params(Query q) {
  std::vector<ParamInfo> out;
  for (size_t i = 0; i < 64; ++i) {
    size_t off = 0, size = 0;
    CUresult r = q(i, &off, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break;
    EXPECT_CU(r) << "parameter " << i;
    if (r != CUDA_SUCCESS) break;
    out.push_back({off, size});
  }
  return out;
}

CUresult load_library(CUlibrary* lib) {
  return cuLibraryLoadData(lib, contract::kernels_image(), nullptr, nullptr, 0, nullptr, nullptr,
                           0);
}

// The fill kernel's parameter buffer: (u32* p, u32 value, u64 n).
struct FillArgs {
  CUdeviceptr p;
  uint32_t value;
  uint32_t pad;
  uint64_t n;
};
static_assert(sizeof(FillArgs) == 24);

std::vector<uint32_t> read_words(CUdeviceptr p, size_t n) {
  std::vector<uint32_t> v(n);
  EXPECT_CU(cuMemcpyDtoH(v.data(), p, n * 4));
  return v;
}

}  // namespace

TEST_F(DriverTest, ModuleLoadDataAndGetFunction) {
  contract::register_contract_host_kernels();
  CUmodule m = nullptr;
  ASSERT_CU(cuModuleLoadData(&m, contract::kernels_image()));
  CUfunction f = nullptr;
  for (const char* name :
       {contract::kFillU32, contract::kAddOneU32, contract::kCopyBytes, contract::kSumU32}) {
    EXPECT_CU(cuModuleGetFunction(&f, m, name)) << name;
    EXPECT_NE(nullptr, f) << name;
  }
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND, cuModuleGetFunction(&f, m, "contract_no_such_kernel"));
  EXPECT_CU(cuModuleUnload(m));
}

TEST_F(DriverTest, FuncGetParamInfoDescribesTheLayout) {
  auto fill = enumerate_params([&](size_t i, size_t* o, size_t* s) {
    return cuFuncGetParamInfo(kernels().fill_u32, i, o, s);
  });
  ASSERT_EQ(3u, fill.size());
  EXPECT_EQ(0u, fill[0].offset);
  EXPECT_EQ(8u, fill[0].size);
  EXPECT_EQ(8u, fill[1].offset);
  EXPECT_EQ(4u, fill[1].size);
  EXPECT_EQ(16u, fill[2].offset);
  EXPECT_EQ(8u, fill[2].size);

  auto add = enumerate_params([&](size_t i, size_t* o, size_t* s) {
    return cuFuncGetParamInfo(kernels().add_one_u32, i, o, s);
  });
  ASSERT_EQ(2u, add.size());
  EXPECT_EQ(8u, add[1].offset);
  auto sum = enumerate_params([&](size_t i, size_t* o, size_t* s) {
    return cuFuncGetParamInfo(kernels().sum_u32, i, o, s);
  });
  ASSERT_EQ(3u, sum.size());
  EXPECT_EQ(16u, sum[2].offset);
  EXPECT_EQ(8u, sum[2].size);
}

TEST_F(DriverTest, LibraryLoadDataGetKernelAndParamInfo) {
  CUlibrary lib = nullptr;
  ASSERT_CU(load_library(&lib));
  CUkernel k = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&k, lib, contract::kCopyBytes));
  auto params = enumerate_params(
      [&](size_t i, size_t* o, size_t* s) { return cuKernelGetParamInfo(k, i, o, s); });
  ASSERT_EQ(3u, params.size());
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(8 * i, params[i].offset);
    EXPECT_EQ(8u, params[i].size);
  }
  CUkernel missing = nullptr;
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND, cuLibraryGetKernel(&missing, lib, "contract_no_such_kernel"));
  EXPECT_CU(cuLibraryUnload(lib));
}

TEST_F(DriverTest, LaunchALibraryKernel) {
  CUlibrary lib = nullptr;
  ASSERT_CU(load_library(&lib));
  CUkernel k = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&k, lib, contract::kCopyBytes));
  const size_t n = 100001;
  DeviceBuffer src(n), dst(n);
  ASSERT_CU(src.status());
  ASSERT_CU(dst.status());
  std::vector<unsigned char> in(n);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(i ^ (i >> 8));
  ASSERT_CU(cuMemcpyHtoD(src.ptr(), in.data(), n));
  // A CUkernel launches as a CUfunction, and cuKernelGetFunction gives one for
  // the current context.
  ASSERT_CU(contract::launch(reinterpret_cast<CUfunction>(k), nullptr, n, dst.ptr(), src.ptr(),
                             static_cast<uint64_t>(n)));
  ASSERT_CU(cuCtxSynchronize());
  std::vector<unsigned char> out(n);
  ASSERT_CU(cuMemcpyDtoH(out.data(), dst.ptr(), n));
  EXPECT_EQ(in, out);

  CUfunction f = nullptr;
  ASSERT_CU(cuKernelGetFunction(&f, k));
  ASSERT_CU(cuMemsetD8(dst.ptr(), 0, n));
  ASSERT_CU(contract::launch(f, nullptr, n, dst.ptr(), src.ptr(), static_cast<uint64_t>(n)));
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuMemcpyDtoH(out.data(), dst.ptr(), n));
  EXPECT_EQ(in, out);
  EXPECT_CU(cuLibraryUnload(lib));
}

TEST_F(DriverTest, LaunchWithKernelParams) {
  const size_t n = 300000;
  DeviceBuffer d(n * 4), acc(8);
  ASSERT_CU(d.status());
  ASSERT_CU(acc.status());
  ASSERT_CU(contract::fill_u32(kernels(), nullptr, d.ptr(), 3u, n));
  ASSERT_CU(contract::add_one_u32(kernels(), nullptr, d.ptr(), n));
  ASSERT_CU(cuMemsetD8(acc.ptr(), 0, 8));
  ASSERT_CU(contract::sum_u32(kernels(), nullptr, d.ptr(), n, acc.ptr()));
  ASSERT_CU(cuCtxSynchronize());
  unsigned long long sum = 0;
  ASSERT_CU(cuMemcpyDtoH(&sum, acc.ptr(), 8));
  EXPECT_EQ(4ull * n, sum);
}

TEST_F(DriverTest, LaunchWithExtraParameterBuffer) {
  const size_t n = 5000;
  DeviceBuffer d(n * 4);
  ASSERT_CU(d.status());
  FillArgs args{d.ptr(), 0x12345678u, 0, n};
  size_t args_size = sizeof args;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &args_size,
                   CU_LAUNCH_PARAM_END};
  ASSERT_CU(cuLaunchKernel(kernels().fill_u32, contract::blocks_for(n), 1, 1, 256, 1, 1, 0, nullptr,
                           nullptr, extra));
  ASSERT_CU(cuCtxSynchronize());
  auto v = read_words(d.ptr(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(0x12345678u, v[i]) << i;
}

TEST_F(DriverTest, LaunchWithBothParamFormsIsInvalidValue) {
  DeviceBuffer d(4096);
  ASSERT_CU(d.status());
  FillArgs args{d.ptr(), 1u, 0, 16};
  size_t args_size = sizeof args;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &args_size,
                   CU_LAUNCH_PARAM_END};
  CUdeviceptr p = d.ptr();
  uint32_t value = 1;
  uint64_t n = 16;
  void* params[] = {&p, &value, &n};
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            cuLaunchKernel(kernels().fill_u32, 1, 1, 1, 32, 1, 1, 0, nullptr, params, extra));
}

TEST_F(DriverTest, LaunchKernelEx) {
  Stream s;
  ASSERT_CU(s.status());
  const size_t n = 70000;
  DeviceBuffer d(n * 4);
  ASSERT_CU(d.status());
  CUlaunchConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = contract::blocks_for(n);
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 256;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = s;
  CUdeviceptr p = d.ptr();
  uint32_t value = 0xc0ffeeu;
  uint64_t count = n;
  void* params[] = {&p, &value, &count};
  ASSERT_CU(cuLaunchKernelEx(&cfg, kernels().fill_u32, params, nullptr));
  void* params2[] = {&p, &count};
  ASSERT_CU(cuLaunchKernelEx(&cfg, kernels().add_one_u32, params2, nullptr));
  ASSERT_CU(cuStreamSynchronize(s));
  auto v = read_words(d.ptr(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(0xc0ffefu, v[i]) << i;
}

TEST_F(DriverTest, LaunchArgumentsAreCapturedAtLaunchTime) {
  // kernelParams are copied at launch: changing them afterwards has no effect.
  Stream s;
  ASSERT_CU(s.status());
  contract::Gate gate;
  ASSERT_CU(gate.enqueue(s));
  const size_t n = 1024;
  DeviceBuffer d(n * 4);
  ASSERT_CU(d.status());
  CUdeviceptr p = d.ptr();
  uint32_t value = 7;
  uint64_t count = n;
  void* params[] = {&p, &value, &count};
  ASSERT_CU(cuLaunchKernel(kernels().fill_u32, 4, 1, 1, 256, 1, 1, 0, s, params, nullptr));
  value = 8;
  gate.open();
  ASSERT_CU(cuStreamSynchronize(s));
  auto v = read_words(d.ptr(), n);
  EXPECT_EQ(7u, v[0]);
  EXPECT_EQ(7u, v[n - 1]);
}

TEST_F(DriverTest, LaunchWithZeroGridIsInvalidValue) {
  DeviceBuffer d(4096);
  ASSERT_CU(d.status());
  CUdeviceptr p = d.ptr();
  uint32_t value = 1;
  uint64_t n = 16;
  void* params[] = {&p, &value, &n};
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            cuLaunchKernel(kernels().fill_u32, 0, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            cuLaunchKernel(kernels().fill_u32, 1, 1, 1, 0, 1, 1, 0, nullptr, params, nullptr));
}

TEST_F(DriverTest, KernelAndItsFunctionAreDistinctHandles) {
  CUlibrary lib = nullptr;
  ASSERT_CU(load_library(&lib));
  CUkernel k = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&k, lib, contract::kFillU32));
  CUfunction f = nullptr;
  ASSERT_CU(cuKernelGetFunction(&f, k));
  ASSERT_NE(nullptr, f);
  EXPECT_NE(static_cast<void*>(k), static_cast<void*>(f));
  // Each kind describes itself through its own query, with the same layout.
  auto by_kernel = enumerate_params(
      [&](size_t i, size_t* o, size_t* s) { return cuKernelGetParamInfo(k, i, o, s); });
  auto by_function = enumerate_params(
      [&](size_t i, size_t* o, size_t* s) { return cuFuncGetParamInfo(f, i, o, s); });
  ASSERT_EQ(3u, by_kernel.size());
  ASSERT_EQ(by_kernel.size(), by_function.size());
  for (size_t i = 0; i < by_kernel.size(); ++i) {
    EXPECT_EQ(by_kernel[i].offset, by_function[i].offset) << i;
    EXPECT_EQ(by_kernel[i].size, by_function[i].size) << i;
  }
  const char* kernel_name = nullptr;
  const char* function_name = nullptr;
  ASSERT_CU(cuKernelGetName(&kernel_name, k));
  ASSERT_CU(cuFuncGetName(&function_name, f));
  EXPECT_STREQ(contract::kFillU32, kernel_name);
  EXPECT_STREQ(contract::kFillU32, function_name);
  EXPECT_CU(cuLibraryUnload(lib));
}

// A launch through a handle of unloaded code has no contract: NVIDIA's
// driver 580 (H200) crashes the process in it (the handle is freed memory).
// simdev refuses it with INVALID_HANDLE (tests/simdev/test_code_handles.cpp).
