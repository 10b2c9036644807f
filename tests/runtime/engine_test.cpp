// The engine in-process (no LD_PRELOAD, so it also runs under the
// sanitizers): a training loop through the launch path with the planner's
// thread acting on it, while another thread allocates and frees, and every
// activation is checked on the device in every step.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "tests/runtime/simdev_kernels.h"

namespace tierrt {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing_simdev::Kernels k;
    ASSERT_NO_FATAL_FAILURE(testing_simdev::set_up(&k));
    fwd_ = k.write;
    bwd_ = k.check;
    ctx_ = k.ctx;
    engine_ = Engine::start();
    ASSERT_NE(nullptr, engine_) << "the engine did not start";
  }

  CUresult launch(CUfunction f, void** params) {
    return engine_->launch(f, nullptr, params, nullptr, [&] {
      return TIERRT_CU(cuLaunchKernel, f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
    });
  }

  // Frees a block the engine handed out: forwarding to the driver would be wrong.
  CUresult free_tracked(CUdeviceptr p) {
    return engine_->free_async(p, nullptr, [] { return CUDA_ERROR_NOT_FOUND; });
  }

  CUfunction fwd_ = nullptr, bwd_ = nullptr;
  CUcontext ctx_ = nullptr;
  Engine* engine_ = nullptr;
};

TEST_F(EngineTest, TrainingLoopKeepsEveryActivationWhileAnotherThreadAllocates) {
  CUdeviceptr bad;
  ASSERT_EQ(CUDA_SUCCESS, engine_->allocate(&bad, 4096, nullptr));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuMemsetD32, bad, 0, 1));

  // Small allocations (slab, below TIERRT_MIN_BYTES) from another thread:
  // they share the allocator with the loop but are not part of the step
  // the planner learns, so the step still repeats exactly.
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    if (TIERRT_CU(cuCtxSetCurrent, ctx_) != CUDA_SUCCESS) std::abort();
    while (!stop.load()) {
      CUdeviceptr p;
      if (engine_->allocate(&p, 64u << 10, nullptr) == CUDA_SUCCESS) (void)free_tracked(p);
    }
  });

  // Weights: allocated before the first step, alive through all of them.
  CUdeviceptr weights;
  ASSERT_EQ(CUDA_SUCCESS, engine_->allocate(&weights, 4u << 20, nullptr));

  const uint32_t layers = 16, steps = 5;
  const size_t bytes = 8u << 20, n = bytes / 4;
  std::vector<CUdeviceptr> act(layers);
  for (uint32_t step = 0; step < steps; ++step) {
    for (uint32_t l = 0; l < layers; ++l) {
      ASSERT_EQ(CUDA_SUCCESS, engine_->allocate(&act[l], bytes, nullptr));
      void* p[] = {&act[l], const_cast<size_t*>(&n), &step, &l};
      ASSERT_EQ(CUDA_SUCCESS, launch(fwd_, p));
    }
    for (uint32_t l = layers; l-- > 0;) {
      void* p[] = {&act[l], const_cast<size_t*>(&n), &step, &l, &bad};
      ASSERT_EQ(CUDA_SUCCESS, launch(bwd_, p));
      ASSERT_EQ(CUDA_SUCCESS, free_tracked(act[l]));
    }
    engine_->note_step();
    uint32_t wrong = 1;
    ASSERT_EQ(CUDA_SUCCESS, engine_->access({{bad, 4}}, CU_STREAM_LEGACY,
                                            [&] { return TIERRT_CU(cuMemcpyDtoH, &wrong, bad, 4); }));
    ASSERT_EQ(0u, wrong) << "step " << step;
  }
  stop.store(true);
  churn.join();
  const alloc::Stats s = engine_->allocator_stats();
  EXPECT_GT(s.spills, 0u) << "the loop never exceeded the budget";
  ASSERT_NE(nullptr, engine_->planner());
  EXPECT_GT(engine_->planner()->spills_issued() + engine_->planner()->prefetches_issued(), 0u)
      << "the planner never acted on the learned step";
  // What the mover saw reached the planner: copy rates, and the demand fetches
  // of the step's own blocks (the loop's activations).
  using Dir = alloc::MoveObserver::Direction;
  EXPECT_GT(engine_->moves().bytes_per_s(Dir::ToHost), 0u);
  if (s.fetches > 0) {
    EXPECT_GT(engine_->moves().bytes_per_s(Dir::ToDevice), 0u);
  }
  if (s.demand_fetches > 0) {
    EXPECT_GT(engine_->planner()->demand_reports(), 0u);
  }
  // What the planner learned of lifetimes shows in the allocator's stats.
  EXPECT_GE(s.class_bytes[1], 4u << 20) << "the weights were not classed persistent";
}

}  // namespace
}  // namespace tierrt
