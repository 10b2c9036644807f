// The engine in-process (no LD_PRELOAD, so it also runs under the
// sanitizers): a training loop through the launch path with the planner's
// thread acting on it, while another thread allocates and frees, and every
// activation is checked on the device in every step.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
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

  // One step: 16 activations of 8 MiB written forward, checked on the
  // device and freed backward (a wrong word counts in `bad`, read here).
  void train_step(uint32_t step, CUdeviceptr bad) {
    const uint32_t layers = 16;
    const size_t bytes = 8u << 20, n = bytes / 4;
    std::vector<CUdeviceptr> act(layers);
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

  for (uint32_t step = 0; step < 5; ++step) ASSERT_NO_FATAL_FAILURE(train_step(step, bad));
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

// Contained failure (its own process: tiering stops for good). The planner
// throws in the middle of a run: tiering stops, blocks spilled before come
// back, nothing is spilled after, and the job goes on with every activation
// intact, past the device budget (the device has room).
// What top -H, gdb and profilers show for the threads tierrt starts.
std::multiset<std::string> thread_names() {
  std::multiset<std::string> names;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) names.insert(name);
  }
  return names;
}

TEST_F(EngineTest, ItsThreadsAreNamed) {
  ASSERT_NE(nullptr, engine_->planner());
  const auto names = thread_names();
  EXPECT_EQ(1u, names.count("tierrt-policy"));
  EXPECT_EQ(1u, names.count("tierrt-mover"));
  EXPECT_GE(names.count("simdev-stream"), 1u);
}

TEST_F(EngineTest, ContainedPlannerExceptionStopsTieringAndTheJobGoesOn) {
  CUdeviceptr bad, weights;
  ASSERT_EQ(CUDA_SUCCESS, engine_->allocate(&bad, 4096, nullptr));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuMemsetD32, bad, 0, 1));
  ASSERT_EQ(CUDA_SUCCESS, engine_->allocate(&weights, 16u << 20, nullptr));
  ASSERT_EQ(CUDA_SUCCESS, engine_->access({{weights, 16u << 20}}, CU_STREAM_LEGACY, [&] {
    return TIERRT_CU(cuMemsetD32, weights, 0x5eed, (16u << 20) / 4);
  }));
  uint32_t step = 0;
  for (; step < 3; ++step) ASSERT_NO_FATAL_FAILURE(train_step(step, bad));
  ASSERT_GT(engine_->allocator_stats().spills_done, 0u) << "nothing was spilled before the failure";
  // The weights are idle: spilled now (unless the planner did already), to
  // be called back after the failure.
  (void)engine_->advise(weights, TIERRT_ADVISE_SPILL);
  const auto spilled_now = [&] { return engine_->allocator_stats().blocks[static_cast<int>(alloc::State::Spilled)]; };
  for (int i = 0; i < 2000 && spilled_now() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GT(spilled_now(), 0u) << "nothing spilled to call back";

  ASSERT_NE(nullptr, engine_->planner());
  engine_->planner_for_tests()->inject_exception();
  for (int i = 0; i < 2000 && !engine_->allocator_stats().tiering_stopped; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(engine_->allocator_stats().tiering_stopped) << "the planner's failure did not stop tiering";
  tierrt_stats t{};
  t.struct_size = sizeof t;
  engine_->public_stats(&t);
  EXPECT_EQ(1u, t.tiering_stopped);
  // The recall comes right after the stop, on the planner's thread.
  for (int i = 0; i < 2000 && spilled_now() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(0u, spilled_now()) << "spilled blocks were not called back";

  const std::uint64_t spills = engine_->allocator_stats().spills;
  for (; step < 6; ++step) ASSERT_NO_FATAL_FAILURE(train_step(step, bad));
  const alloc::Stats s = engine_->allocator_stats();
  EXPECT_EQ(spills, s.spills) << "a spill started after tiering stopped";
  EXPECT_GT(s.device_used, s.device_budget);
  std::vector<uint32_t> w((16u << 20) / 4);
  ASSERT_EQ(CUDA_SUCCESS, engine_->access({{weights, 16u << 20}}, CU_STREAM_LEGACY, [&] {
    return TIERRT_CU(cuMemcpyDtoH, w.data(), weights, 16u << 20);
  }));
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(0x5eedu, w[i]) << "weights word " << i;
}

}  // namespace
}  // namespace tierrt
