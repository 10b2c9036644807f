// Kernels and an engine fixture for the launch-path tests: engines of their
// own per spill mode and policy, kernels that reach memory through pointer
// tables, kernels that write after a delay (so that work still runs when
// the test acts), and kernels that never dereference a parameter.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "driver/driver.h"
#include "runtime/engine.h"
#include "simdev/simdev.h"

namespace tierrt::launch_test {

using u32 = std::uint32_t;
using u64 = std::uint64_t;

template <class T>
T param(const simdev_launch* l, unsigned i) {
  T v;
  std::memcpy(&v, l->params[i], sizeof v);
  return v;
}

// fill(out, n, value, delay_ms): after delay_ms, out[0..n) = value.
inline void fill_kernel(const simdev_launch* l) {
  auto* out = reinterpret_cast<u32*>(param<u64>(l, 0));
  const u64 n = param<u64>(l, 1);
  const u32 value = param<u32>(l, 2), delay_ms = param<u32>(l, 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  for (u64 i = 0; i < n; ++i) out[i] = value;
}

// gather(table, count, out, words): out[i] = how many of the first `words`
// words of the block table[i] points to equal the block's first word, plus
// that first word in out[count + i].
inline void gather_kernel(const simdev_launch* l) {
  const auto* table = reinterpret_cast<const u64*>(param<u64>(l, 0));
  const u64 count = param<u64>(l, 1);
  auto* out = reinterpret_cast<u32*>(param<u64>(l, 2));
  const u64 words = param<u64>(l, 3);
  for (u64 i = 0; i < count; ++i) {
    const auto* target = reinterpret_cast<const u32*>(table[i]);
    u32 same = 0;
    for (u64 w = 0; w < words; ++w) same += target[w] == target[0];
    out[i] = same;
    out[count + i] = target[0];
  }
}

// ignore(unused, out): out[0] = 1; `unused` is never dereferenced.
inline void ignore_kernel(const simdev_launch* l) {
  auto* out = reinterpret_cast<u32*>(param<u64>(l, 1));
  out[0] = 1;
}

// Registers kernel `name` with 8-byte and 4-byte parameters as `sizes` says.
inline void register_kernel(const std::string& name, simdev_kernel_fn fn, std::vector<size_t> sizes) {
  auto reg = reinterpret_cast<int (*)(const simdev_kernel_desc*)>(drv::resolve("simdev_register_kernel"));
  ASSERT_NE(nullptr, reg) << "runs on simdev";
  static std::vector<std::vector<size_t>> keep;  // simdev reads the sizes at registration only
  keep.push_back(std::move(sizes));
  simdev_kernel_desc d{name.c_str(), fn, static_cast<unsigned>(keep.back().size()), keep.back().data(), nullptr, 0};
  ASSERT_EQ(0, reg(&d));
}

inline CUfunction function(const std::string& name) {
  CUmodule m = nullptr;
  CUfunction f = nullptr;
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuModuleLoadData, &m, "simdev"));
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuModuleGetFunction, &f, m, name.c_str()));
  return f;
}

inline CUcontext primary_context() {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuInit, 0));
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuDeviceGet, &dev, 0));
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuDevicePrimaryCtxRetain, &ctx, dev));
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSetCurrent, ctx));
  return ctx;
}

using ModeAndPolicy = std::tuple<alloc::SpillMode, Policy>;

inline std::string name_of(const ::testing::TestParamInfo<ModeAndPolicy>& info) {
  return std::string(alloc::to_string(std::get<0>(info.param))) +
         (std::get<1>(info.param) == Policy::Planner ? "Planner" : "Reactive");
}

inline auto every_mode_and_policy() {
  return ::testing::Combine(::testing::Values(alloc::SpillMode::Remap, alloc::SpillMode::Copy),
                            ::testing::Values(Policy::Planner, Policy::Reactive));
}

// An engine of its own per test, in the spill mode and policy of the
// parameter's first two members; the kernels registered once.
template <class Param = ModeAndPolicy>
class EngineFixture : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    ctx_ = primary_context();
    static bool registered = false;
    if (!registered) {
      register_kernel("launch_test_fill", &fill_kernel, {8, 8, 4, 4});
      register_kernel("launch_test_gather", &gather_kernel, {8, 8, 8, 8});
      register_kernel("launch_test_ignore", &ignore_kernel, {8, 8});
      registered = true;
    }
    fill_ = function("launch_test_fill");
    gather_ = function("launch_test_gather");
    ignore_ = function("launch_test_ignore");
    ASSERT_NO_FATAL_FAILURE(start_engine());
  }
  // Settings a fixture changes before its engine starts.
  virtual void adjust(Settings&) {}
  void start_engine() {
    engine_.reset();
    Settings s;
    std::string error;
    ASSERT_TRUE(read_settings(&s, &error)) << error;
    s.mode = Mode::Tier;
    s.spill_mode = std::get<0>(this->GetParam());
    s.policy = std::get<1>(this->GetParam());
    adjust(s);
    CUresult err = CUDA_SUCCESS;
    engine_ = Engine::create(s, &err);
    ASSERT_NE(nullptr, engine_) << drv::result_name(err);
  }
  void TearDown() override {
    if (engine_) {
      EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
    }
    engine_.reset();
  }

  CUdeviceptr allocate(size_t bytes, CUstream s = nullptr) {
    CUdeviceptr p = 0;
    EXPECT_EQ(CUDA_SUCCESS, engine_->allocate(&p, bytes, s));
    return p;
  }
  CUresult free_memory(CUdeviceptr p, CUstream s = nullptr) {
    return engine_->free_async(p, s, [] { return CUDA_ERROR_NOT_FOUND; });
  }
  CUresult launch(CUfunction f, CUstream s, std::vector<void*> params) {
    return engine_->launch(f, s, params.data(), nullptr, [&] {
      return TIERRT_CU(cuLaunchKernel, f, 1, 1, 1, 1, 1, 1, 0, s, params.data(), nullptr);
    });
  }
  // Device memory written and read through the engine, as the copy hooks do.
  CUresult upload(CUdeviceptr dst, const void* src, size_t bytes, CUstream s = nullptr) {
    return engine_->copy_to_device(dst, src, bytes, s, [&] { return TIERRT_CU(cuMemcpyHtoD, dst, src, bytes); });
  }
  std::vector<u32> download(CUdeviceptr src, size_t words) {
    std::vector<u32> out(words, 0xdeadbeef);
    EXPECT_EQ(CUDA_SUCCESS, engine_->access({{src, words * 4}}, nullptr, [&] {
      return TIERRT_CU(cuMemcpyDtoH, out.data(), src, words * 4);
    }));
    return out;
  }
  CUresult set(CUdeviceptr dst, u32 value, size_t words) {
    return engine_->access({{dst, words * 4}}, nullptr, [&] { return TIERRT_CU(cuMemsetD32, dst, value, words); });
  }
  std::uint64_t spilled() const { return engine_->allocator_stats().blocks[static_cast<int>(alloc::State::Spilled)]; }
  // Spills `p` and waits until it is SPILLED (`before`: blocks spilled already).
  bool spill(CUdeviceptr p) {
    const std::uint64_t before = spilled();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!engine_->advise(p, TIERRT_ADVISE_SPILL)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    while (spilled() <= before) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  CUcontext ctx_ = nullptr;
  CUfunction fill_ = nullptr, gather_ = nullptr, ignore_ = nullptr;
  std::unique_ptr<Engine> engine_;
};

}  // namespace tierrt::launch_test
