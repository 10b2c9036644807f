// What the capture and graph tests share: the running engine on simdev, its
// use cases called as the hooks call them (each forwarding to the driver),
// and graph entry points looked up in the driver, since tierrt itself never
// calls them.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "runtime/engine.h"
#include "tests/runtime/simdev_kernels.h"

namespace tierrt::testing_graphs {

// A driver function tierrt's table does not hold, or null.
template <class Fn>
Fn driver_fn(const char* name) {
  return reinterpret_cast<Fn>(drv::resolve(name));
}

class GraphTest : public ::testing::Test {
 public:
  static constexpr size_t kBytes = 4u << 20, kWords = kBytes / 4;

 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(testing_simdev::set_up(&k_));
    e_ = Engine::start();
    ASSERT_NE(nullptr, e_) << "the engine did not start";
    ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamCreate, &s_, CU_STREAM_NON_BLOCKING));
    ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamCreate, &other_, CU_STREAM_NON_BLOCKING));
    bad_ = allocate(4, nullptr);  // a small-object slot: never moves
    ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuMemsetD32, bad_, 0, 1));
  }
  void TearDown() override {
    if (e_) (void)free_now(bad_);
    if (s_) (void)TIERRT_CU(cuStreamDestroy, s_);
    if (other_) (void)TIERRT_CU(cuStreamDestroy, other_);
  }

  CUdeviceptr allocate(size_t bytes, CUstream stream) {
    CUdeviceptr p = 0;
    EXPECT_EQ(CUDA_SUCCESS, e_->allocate(&p, bytes, stream));
    return p;
  }
  CUresult free_now(CUdeviceptr p) {
    return e_->free(p, [&] { return TIERRT_CU(cuMemFree, p); });
  }
  CUresult free_on(CUdeviceptr p, CUstream stream) {
    return e_->free_async(p, stream, [&] { return TIERRT_CU(cuMemFreeAsync, p, stream); });
  }
  bool advise(CUdeviceptr p, tierrt_advice a) { return e_->advise(p, a); }
  // A spill is refused while an earlier move of the block is being finalised.
  bool spills_soon(CUdeviceptr p) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!advise(p, TIERRT_ADVISE_SPILL)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  std::uint64_t spilled_blocks() {
    return e_->allocator_stats().blocks[static_cast<int>(alloc::State::Spilled)];
  }
  // Spills `p` and waits until the mover finalised the spill.
  void spill_fully(CUdeviceptr p) {
    const std::uint64_t before = spilled_blocks();
    ASSERT_TRUE(spills_soon(p));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (spilled_blocks() <= before) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the spill did not finish";
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // write(act, n, step, 0) and check(act, n, step, 0, bad) on `stream`,
  // through the engine's launch use case.
  CUresult write(CUdeviceptr act, std::uint32_t step, CUstream stream) {
    size_t n = kWords;
    std::uint32_t layer = 0;
    void* params[] = {&act, &n, &step, &layer};
    return e_->launch(k_.write, stream, params, nullptr, [&] {
      return TIERRT_CU(cuLaunchKernel, k_.write, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
    });
  }
  CUresult check(CUdeviceptr act, std::uint32_t step, CUstream stream) {
    size_t n = kWords;
    std::uint32_t layer = 0;
    void* params[] = {&act, &n, &step, &layer, &bad_};
    return e_->launch(k_.check, stream, params, nullptr, [&] {
      return TIERRT_CU(cuLaunchKernel, k_.check, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
    });
  }
  // Words check() found wrong so far.
  std::uint32_t wrong() {
    std::uint32_t n = ~0u;
    EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
    EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuMemcpyDtoH, &n, bad_, 4));
    return n;
  }

  CUresult begin(CUstream s, CUstreamCaptureMode mode) {
    return e_->begin_capture(s, mode, [&] { return TIERRT_CU(cuStreamBeginCapture, s, mode); });
  }
  CUgraph end(CUstream s) {
    CUgraph g = nullptr;
    EXPECT_EQ(CUDA_SUCCESS, e_->end_capture(s, &g, [&] { return TIERRT_CU(cuStreamEndCapture, s, &g); }));
    return g;
  }
  CUgraphExec instantiate(CUgraph g) {
    auto fn = driver_fn<decltype(&cuGraphInstantiateWithFlags)>("cuGraphInstantiateWithFlags");
    CUgraphExec exec = nullptr;
    EXPECT_EQ(CUDA_SUCCESS, e_->graph_instantiate(&exec, g, [&] { return fn(&exec, g, 0); }));
    return exec;
  }
  CUresult launch_graph(CUgraphExec exec, CUstream s) {
    return e_->graph_launch(exec, s, [&] { return TIERRT_CU(cuGraphLaunch, exec, s); });
  }
  void destroy(CUgraph g, CUgraphExec exec) {
    auto destroy_exec = driver_fn<decltype(&cuGraphExecDestroy)>("cuGraphExecDestroy");
    auto destroy_graph = driver_fn<decltype(&cuGraphDestroy)>("cuGraphDestroy");
    if (exec) {
      EXPECT_EQ(CUDA_SUCCESS, e_->graph_exec_destroy(exec, [&] { return destroy_exec(exec); }));
    }
    if (g) {
      EXPECT_EQ(CUDA_SUCCESS, e_->graph_destroy(g, [&] { return destroy_graph(g); }));
    }
  }

  testing_simdev::Kernels k_;
  Engine* e_ = nullptr;
  CUstream s_ = nullptr, other_ = nullptr;
  CUdeviceptr bad_ = 0;
};

}  // namespace tierrt::testing_graphs
