// Parameter layouts: a launch whose layout is unknown names every block; a
// layout the driver would not give is asked for again; an unload forgets
// every layout (a new function may get an old handle); library kernels are
// described as kernels; a driver that cannot describe parameters gets no
// tiering.
#include <gtest/gtest.h>

#include <atomic>

#include "tests/runtime/launch_kernels.h"

namespace tierrt::launch_test {
namespace {

// A kernel name no other test used: layouts are kept per handle for the
// whole process, and simdev hands out one handle per name.
std::string fresh_name(const char* what) {
  static std::atomic<int> n{0};
  return std::string("layout_test_") + what + "_" + std::to_string(n++);
}

// fill_tail(n, pad, pad, out): out[0..n) = 0x5A. Its pointer comes last.

using KernelParamInfoFn = CUresult (*)(CUkernel, size_t, size_t*, size_t*);

class ParamLayoutsTest : public EngineFixture<> {
 protected:
  static constexpr size_t kBytes = 4u << 20, kWords = kBytes / 4;
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(EngineFixture::SetUp());
    block_ = allocate(kBytes);
    ASSERT_EQ(CUDA_SUCCESS, set(block_, 0, kWords));
  }
  void TearDown() override {
    auto clear = reinterpret_cast<void (*)()>(drv::resolve("simdev_clear_faults"));
    if (clear) clear();
    drv::set_counting(false);
    EXPECT_EQ(CUDA_SUCCESS, free_memory(block_));
    EngineFixture::TearDown();
  }
  // fill(block_, kWords, value, 0) through `f`: the block is made resident
  // for it, and every word is `value` after.
  void fill_block(CUfunction f, u32 value) {
    u64 n = kWords;
    u32 delay = 0;
    ASSERT_EQ(CUDA_SUCCESS, launch(f, nullptr, {(void*)&block_, &n, &value, &delay}));
    EXPECT_EQ(0u, spilled()) << "the launch's block was not made resident";
    expect_block(value);
  }
  void expect_block(u32 value) {
    ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
    size_t wrong = 0;
    for (u32 w : download(block_, kWords)) wrong += w != value;
    EXPECT_EQ(0u, wrong);
  }
  static void fail_next_param_queries() {
    auto inject = reinterpret_cast<int (*)(const char*, unsigned long long, int)>(drv::resolve("simdev_inject_fault"));
    ASSERT_NE(nullptr, inject);
    ASSERT_EQ(0, inject("cuFuncGetParamInfo", 1, CUDA_ERROR_UNKNOWN));
    ASSERT_EQ(0, inject("cuKernelGetParamInfo", 1, CUDA_ERROR_UNKNOWN));
  }

  CUdeviceptr block_ = 0;
};

TEST_P(ParamLayoutsTest, AnUnknownLayoutNamesEveryBlockAndIsAskedForAgain) {
  const std::string name = fresh_name("unknown");
  ASSERT_NO_FATAL_FAILURE(register_kernel(name, &fill_kernel, {8, 8, 4, 4}));
  const CUfunction f = function(name);
  ASSERT_TRUE(spill(block_));
  ASSERT_NO_FATAL_FAILURE(fail_next_param_queries());
  ASSERT_NO_FATAL_FAILURE(fill_block(f, 0x31));
  // The driver answers now: the launch is scanned, not cached as empty.
  ASSERT_TRUE(spill(block_));
  drv::set_counting(true);
  drv::reset_counts();
  ASSERT_NO_FATAL_FAILURE(fill_block(f, 0x32));
  EXPECT_GT(drv::calls(drv::Id::cuFuncGetParamInfo) + drv::calls(drv::Id::cuKernelGetParamInfo), 0u);
  // Asked once: the answer is kept.
  drv::reset_counts();
  ASSERT_NO_FATAL_FAILURE(fill_block(f, 0x33));
  EXPECT_EQ(0u, drv::calls(drv::Id::cuFuncGetParamInfo) + drv::calls(drv::Id::cuKernelGetParamInfo));
}

// After an unload a new function may get an old handle (the driver reuses
// them): every layout learned before is forgotten, so the next launch of any
// handle asks the driver again instead of trusting what it knew.
TEST_P(ParamLayoutsTest, AnUnloadForgetsLayoutsSoANewFunctionAtAnOldHandleIsScanned) {
  const std::string name = fresh_name("unload");
  ASSERT_NO_FATAL_FAILURE(register_kernel(name, &fill_kernel, {8, 8, 4, 4}));
  const CUfunction f = function(name);
  ASSERT_NO_FATAL_FAILURE(fill_block(f, 0x41));
  drv::set_counting(true);
  drv::reset_counts();
  ASSERT_NO_FATAL_FAILURE(fill_block(f, 0x42));
  EXPECT_EQ(0u, drv::calls(drv::Id::cuFuncGetParamInfo) + drv::calls(drv::Id::cuKernelGetParamInfo));
  Engine::note_unload();
  drv::reset_counts();
  ASSERT_NO_FATAL_FAILURE(fill_block(f, 0x43));
  EXPECT_GT(drv::calls(drv::Id::cuFuncGetParamInfo) + drv::calls(drv::Id::cuKernelGetParamInfo), 0u)
      << "a layout learned before the unload was trusted after it";
  drv::set_counting(false);
}

TEST_P(ParamLayoutsTest, LibraryKernelsAreDescribedAsKernelsAndFunctionsAsFunctions) {
  const std::string name = fresh_name("library");
  ASSERT_NO_FATAL_FAILURE(register_kernel(name, &fill_kernel, {8, 8, 4, 4}));
  using LoadFn = CUresult (*)(CUlibrary*, const void*, CUjit_option*, void**, unsigned, CUlibraryOption*, void**,
                              unsigned);
  using GetKernelFn = CUresult (*)(CUkernel*, CUlibrary, const char*);
  auto load = reinterpret_cast<LoadFn>(drv::resolve("cuLibraryLoadData"));
  auto get_kernel = reinterpret_cast<GetKernelFn>(drv::resolve("cuLibraryGetKernel"));
  ASSERT_TRUE(load && get_kernel);
  CUlibrary lib = nullptr;
  CUkernel k = nullptr;
  ASSERT_EQ(CUDA_SUCCESS, load(&lib, "simdev", nullptr, nullptr, 0, nullptr, nullptr, 0));
  ASSERT_EQ(CUDA_SUCCESS, get_kernel(&k, lib, name.c_str()));
  Engine::note_kernel(k);
  ASSERT_TRUE(spill(block_));
  drv::set_counting(true);
  drv::reset_counts();
  ASSERT_NO_FATAL_FAILURE(fill_block(reinterpret_cast<CUfunction>(k), 0x51));
  EXPECT_EQ(0u, drv::calls(drv::Id::cuFuncGetParamInfo)) << "a library kernel was described as a function";
  EXPECT_GT(drv::calls(drv::Id::cuKernelGetParamInfo), 0u);

  const std::string other = fresh_name("function");
  ASSERT_NO_FATAL_FAILURE(register_kernel(other, &fill_kernel, {8, 8, 4, 4}));
  const CUfunction f = function(other);
  Engine::note_function(f);
  drv::reset_counts();
  ASSERT_NO_FATAL_FAILURE(fill_block(f, 0x52));
  EXPECT_EQ(0u, drv::calls(drv::Id::cuKernelGetParamInfo)) << "a function was described as a library kernel";
  EXPECT_GT(drv::calls(drv::Id::cuFuncGetParamInfo), 0u);
}

// A word into memory freed since (still mapped: the block waits in the
// cache) is no reason to fail a launch that never dereferences it.
TEST_P(ParamLayoutsTest, AWordIntoFreedMemoryIsIgnored) {
  const CUdeviceptr freed = allocate(kBytes);
  ASSERT_EQ(CUDA_SUCCESS, free_memory(freed));
  const CUdeviceptr out = allocate(4096);
  ASSERT_EQ(CUDA_SUCCESS, set(out, 0, 1));
  EXPECT_EQ(CUDA_SUCCESS, launch(ignore_, nullptr, {(void*)&freed, (void*)&out}));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
  EXPECT_EQ(1u, download(out, 1)[0]);
  EXPECT_EQ(CUDA_SUCCESS, free_memory(out));
}

INSTANTIATE_TEST_SUITE_P(All, ParamLayoutsTest, every_mode_and_policy(), name_of);

// Run with SIMDEV_DRIVER_VERSION set below 12.4 (its own meson test).
TEST(OldDriver, ADriverThatCannotDescribeParametersGetsNoTiering) {
  primary_context();
  int version = 0;
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuDriverGetVersion, &version));
  if (version >= 12040) GTEST_SKIP() << "the driver describes parameters (simdev without SIMDEV_DRIVER_VERSION)";
  EXPECT_FALSE(ParamLayouts::driver_describes_parameters());
  Settings s;
  std::string error;
  ASSERT_TRUE(read_settings(&s, &error)) << error;
  s.mode = Mode::Tier;
  CUresult err = CUDA_SUCCESS;
  std::unique_ptr<Engine> e = Engine::create(s, &err);
  ASSERT_NE(nullptr, e) << drv::result_name(err);
  EXPECT_EQ(Mode::Observe, e->settings().mode);
}

TEST(OldDriver, ThisDriverDescribesParameters) {
  primary_context();
  int version = 0;
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuDriverGetVersion, &version));
  if (version < 12040) GTEST_SKIP() << "an older driver";
  EXPECT_TRUE(ParamLayouts::driver_describes_parameters());
}

}  // namespace
}  // namespace tierrt::launch_test
