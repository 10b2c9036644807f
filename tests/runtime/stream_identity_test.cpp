// The planner learns a run's step from the streams its work arrives on, so
// it must see the same stream identities whether or not the run is
// recorded: the same loop, on two streams, through an engine without a
// recording and through one with TIERRT_RECORD, learns the same step.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "tests/runtime/simdev_kernels.h"

namespace tierrt {
namespace {

constexpr std::uint32_t kSteps = 6, kLayers = 8;

// Forward then backward over kLayers activations, the layers alternating
// between two streams, a step marker and a sync of one stream after each
// step; returns what the planner learned.
PolicyThread::LearnedStep run_loop(Engine& e, const testing_simdev::Kernels& k, CUstream s1, CUstream s2) {
  auto fail = [] { return CUDA_ERROR_NOT_FOUND; };
  const size_t bytes = 1u << 20, n = bytes / 4;
  CUdeviceptr bad = 0;
  EXPECT_EQ(CUDA_SUCCESS, e.allocate(&bad, 4096, nullptr));
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuMemsetD32, bad, 0, 1));
  std::vector<CUdeviceptr> act(kLayers);
  e.note_step();
  for (std::uint32_t step = 0; step < kSteps; ++step) {
    for (std::uint32_t l = 0; l < kLayers; ++l) {
      CUstream s = l % 2 ? s2 : s1;
      EXPECT_EQ(CUDA_SUCCESS, e.allocate(&act[l], bytes, s));
      void* p[] = {&act[l], const_cast<size_t*>(&n), &step, &l};
      EXPECT_EQ(CUDA_SUCCESS, e.launch(k.write, s, p, nullptr, [&] {
        return TIERRT_CU(cuLaunchKernel, k.write, 1, 1, 1, 1, 1, 1, 0, s, p, nullptr);
      }));
    }
    for (std::uint32_t l = kLayers; l-- > 0;) {
      CUstream s = l % 2 ? s2 : s1;
      void* p[] = {&act[l], const_cast<size_t*>(&n), &step, &l, &bad};
      EXPECT_EQ(CUDA_SUCCESS, e.launch(k.check, s, p, nullptr, [&] {
        return TIERRT_CU(cuLaunchKernel, k.check, 1, 1, 1, 1, 1, 1, 0, s, p, nullptr);
      }));
      EXPECT_EQ(CUDA_SUCCESS, e.free_async(act[l], s, fail));
    }
    EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamSynchronize, s2));
    e.note_sync(s2, false);
    e.note_step();
  }
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
  std::uint32_t wrong = 1;
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuMemcpyDtoH, &wrong, bad, 4));
  EXPECT_EQ(0u, wrong);
  EXPECT_EQ(CUDA_SUCCESS, e.free_async(bad, nullptr, fail));

  const PolicyThread* planner = e.planner();
  EXPECT_NE(nullptr, planner);
  if (!planner) return {};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (planner->learned_step().steps < kSteps && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return planner->learned_step();
}

TEST(StreamIdentity, TheSameRunLearnsTheSameStepWithAndWithoutRecording) {
  testing_simdev::Kernels k;
  ASSERT_NO_FATAL_FAILURE(testing_simdev::set_up(&k));
  CUstream s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamCreate, &s1, CU_STREAM_NON_BLOCKING));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamCreate, &s2, CU_STREAM_NON_BLOCKING));

  Settings settings;
  std::string error;
  ASSERT_TRUE(read_settings(&settings, &error)) << error;
  ASSERT_TRUE(settings.record.empty() && settings.trace.empty());

  auto learn = [&](const Settings& s) {
    CUresult err = CUDA_SUCCESS;
    std::unique_ptr<Engine> e = Engine::create(s, &err);
    EXPECT_NE(nullptr, e) << "the engine did not start: " << err;
    return e ? run_loop(*e, k, s1, s2) : PolicyThread::LearnedStep{};
  };
  const PolicyThread::LearnedStep plain = learn(settings);
  Settings recording = settings;
  recording.record = ::testing::TempDir() + "stream_identity.trace";
  const PolicyThread::LearnedStep recorded = learn(recording);

  ASSERT_EQ(kSteps, plain.steps) << "no step learned without recording";
  ASSERT_EQ(kSteps, recorded.steps) << "no step learned with recording";
  EXPECT_EQ(2 * kLayers, plain.launches);
  EXPECT_EQ(plain.launches, recorded.launches);
  EXPECT_EQ(plain.signature, recorded.signature) << "the step's token sequence differs";
  EXPECT_EQ(plain.classes, recorded.classes) << "the blocks were classified differently";
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamDestroy, s1));
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamDestroy, s2));
}

}  // namespace
}  // namespace tierrt
