// Steps the planner finds without markers turn the granule groups' boundary
// bits, as tierrt_mark_step does (Allocator::step_ended); marked steps are
// turned by the marker alone, never twice. The device clock's sampling
// period adapts at each step's end, and backs off while none is found
// (device_clock.h); the thread asks about a sample seldom while the device
// is behind.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "runtime/engine.h"
#include "runtime/policy_thread.h"
#include "tests/runtime/planner_engine.h"

namespace tierrt {
namespace {

using testing_planner::eventually;
using testing_planner::planner_engine;

// One training-like step: 8 layers whose activations are written in the
// forward pass and read back in the backward pass, then freed, with one
// weight read throughout (addresses only: nothing of the allocator's).
void post_step(PolicyThread& t, policy::LaunchSeq* seq, bool marked, std::uint64_t index) {
  using policy::Event;
  constexpr policy::BlockId kWeight = 0x7000'0000, kActivations = 0x7100'0000;
  constexpr int kLayers = 8;
  auto launch = [&](policy::BlockId a) {
    t.post(Event::launch((*seq)++, 0));
    t.post(Event::use(kWeight, *seq - 1));
    t.post(Event::use(a, *seq - 1));
  };
  for (int i = 0; i < kLayers; ++i) {
    t.post(Event::alloc(kActivations + (i << 24), 8u << 20));
    launch(kActivations + (i << 24));
  }
  for (int i = kLayers - 1; i >= 0; --i) launch(kActivations + (i << 24));
  for (int i = 0; i < kLayers; ++i) t.post(Event::free(kActivations + (i << 24)));
  if (marked) t.post(Event::step(index));
}

class PolicyThreadSteps : public ::testing::Test {
 protected:
  void SetUp() override {
    e = planner_engine();
    ASSERT_NE(nullptr, e);
    t = e->planner_for_tests();
    ASSERT_NE(nullptr, t);
    t->post(policy::Event::alloc(0x7000'0000, 64u << 20));  // the weight
  }
  std::unique_ptr<Engine> e;
  PolicyThread* t = nullptr;
  policy::LaunchSeq seq = 1;
};

TEST_F(PolicyThreadSteps, AStepFoundWithoutMarkersTurnsTheGranuleBoundaries) {
  for (std::uint64_t i = 0; i < 200; ++i) post_step(*t, &seq, /*marked=*/false, i);
  ASSERT_TRUE(eventually([&] { return t->steps_learned() > 0; })) << "no step was found";
  EXPECT_TRUE(eventually([&] { return e->allocator_stats().group_steps > 0; }))
      << "steps were found but the granule boundaries never turned";
}

TEST_F(PolicyThreadSteps, MarkedStepsAreTurnedByTheMarkerAlone) {
  for (std::uint64_t i = 0; i < 50; ++i) post_step(*t, &seq, /*marked=*/true, i);
  ASSERT_TRUE(eventually([&] { return t->steps_learned() >= 40; })) << "the marked steps were not learned";
  EXPECT_EQ(0u, e->allocator_stats().group_steps) << "the policy thread turned marked steps too";
  e->note_step();  // what tierrt_mark_step does
  EXPECT_EQ(1u, e->allocator_stats().group_steps);
}

TEST_F(PolicyThreadSteps, TheDeviceClockSamplesSparselyWhileStepsGoAsPlannedAndDenselyAfterAMiss) {
  EXPECT_EQ(DeviceClock::kEvery, t->clock_period()) << "a planner that has learned nothing samples densely";
  // (The first marker ends no step: a step is learned from the second on.)
  for (std::uint64_t i = 0; i < 12; ++i) post_step(*t, &seq, /*marked=*/true, i);
  ASSERT_TRUE(eventually([&] { return t->steps_learned() >= 11; })) << t->steps_learned() << " steps learned";
  EXPECT_EQ(0u, t->mispredictions());
  EXPECT_EQ(DeviceClock::kEvery << DeviceClock::kMaxShift, t->clock_period())
      << "ten steps without a miss and the clock still samples every " << t->clock_period() << "th launch";
  // A demand fetch: the plan's timing may be off, so durations are measured densely again.
  t->post_demand_fetch(0x7100'0000);
  EXPECT_TRUE(eventually([&] { return t->clock_period() == DeviceClock::kEvery; }))
      << "after a demand fetch the clock samples every " << t->clock_period() << "th launch";
  // And the next step, with the miss in it, keeps it dense.
  const std::uint64_t learned = t->steps_learned();
  post_step(*t, &seq, /*marked=*/true, 12);
  ASSERT_TRUE(eventually([&] { return t->steps_learned() > learned; }));
  EXPECT_EQ(DeviceClock::kEvery, t->clock_period());
}

// Launches naming the weight and nothing else happening: no marker, and no
// allocation for step detection to find a period in (what a job running in
// XLA's preallocated pool shows). Paced so that the ring never fills (a
// dropped launch would not be counted); true once the thread took them all.
bool post_unstepped(PolicyThread& t, policy::LaunchSeq* seq, std::uint64_t launches) {
  const std::uint64_t taken_before = t.messages_taken(), dropped_before = t.dropped();
  std::uint64_t posted = 0;
  for (std::uint64_t i = 0; i < launches; ++i) {
    t.post(policy::Event::launch((*seq)++, 0));
    t.post(policy::Event::use(0x7000'0000, *seq - 1));
    posted += 2;
    while (posted > t.messages_taken() - taken_before + 8192) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return eventually([&] { return t.messages_taken() - taken_before >= posted; }) && t.dropped() == dropped_before;
}

TEST_F(PolicyThreadSteps, TheDeviceClockBacksOffWhileNoStepIsFound) {
  constexpr std::uint64_t kQuiet = PolicyThread::kUnlearnedLaunches;
  ASSERT_TRUE(post_unstepped(*t, &seq, kQuiet - 64));
  EXPECT_EQ(DeviceClock::kEvery, t->clock_period()) << "sparser before kUnlearnedLaunches launches passed";
  ASSERT_TRUE(post_unstepped(*t, &seq, 128));
  EXPECT_EQ(DeviceClock::kEvery << 1, t->clock_period())
      << kQuiet + 64 << " launches without a step, and the clock still samples every " << t->clock_period()
      << "th launch";
  // A miss, half the quiet span later: dense again, and the count starts anew from it.
  ASSERT_TRUE(post_unstepped(*t, &seq, kQuiet / 2));
  t->post_demand_fetch(0x7000'0000);
  ASSERT_TRUE(post_unstepped(*t, &seq, kQuiet - 64));
  EXPECT_EQ(DeviceClock::kEvery, t->clock_period()) << "the back-off did not start again from the miss";
  ASSERT_TRUE(post_unstepped(*t, &seq, 128));
  EXPECT_EQ(DeviceClock::kEvery << 1, t->clock_period());
  // The next halving waits twice as long.
  ASSERT_TRUE(post_unstepped(*t, &seq, 2 * kQuiet - 256));
  EXPECT_EQ(DeviceClock::kEvery << 1, t->clock_period()) << "the second halving came before 2 x kUnlearnedLaunches";
  ASSERT_TRUE(post_unstepped(*t, &seq, 512));
  EXPECT_EQ(DeviceClock::kEvery << 2, t->clock_period());
  EXPECT_EQ(0u, t->steps_learned()) << "a step was found where none was posted: this test times nothing";
}

// While the device is behind (a stream held by a host function, every
// sample of 1024 launches queued behind it), the thread asks about the
// oldest sample more and more seldom (8, 16, 32, then every 64 launches it
// takes, and once at each turn's end), where it asked every 8 launches (128
// times here); once the stream runs, every sample is read.
TEST_F(PolicyThreadSteps, TheDeviceClockIsAskedSeldomWhileTheDeviceIsBehind) {
  constexpr std::uint64_t kLaunches = 1024;
  CUstream s = nullptr;
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  auto launch_host_fn = reinterpret_cast<decltype(&cuLaunchHostFunc)>(drv::resolve("cuLaunchHostFunc"));
  ASSERT_NE(nullptr, launch_host_fn);
  std::atomic<bool> open{false};
  CUhostFn wait_for_gate = [](void* gate) {
    while (!static_cast<std::atomic<bool>*>(gate)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  ASSERT_EQ(CUDA_SUCCESS, launch_host_fn(s, wait_for_gate, &open));
  const std::uint64_t taken = t->messages_taken(), read = t->clock_samples_read(), not_yet = t->clock_not_yet();
  ASSERT_EQ(DeviceClock::kEvery, t->clock_period());
  for (std::uint64_t i = 0; i < kLaunches; ++i) t->post_launch(seq++, 1, s, /*may_time=*/true, {});
  ASSERT_TRUE(eventually([&] { return t->messages_taken() - taken >= kLaunches; }));
  const std::uint64_t asked = t->clock_not_yet() - not_yet;
  EXPECT_GT(asked, 0u) << "the thread never found a sample not done: this test measures nothing";
  EXPECT_LT(asked, kLaunches / DeviceClock::kEvery / 2)
      << "the thread asked about a sample not done " << asked << " times in " << kLaunches << " launches";
  // The first sample only opens the series (there is no earlier one to time from).
  EXPECT_LE(t->clock_samples_read() - read, 1u) << "a sample behind the held stream was read";
  open.store(true);
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamSynchronize, s));
  EXPECT_TRUE(eventually([&] { return t->clock_samples_read() - read == kLaunches / DeviceClock::kEvery; }))
      << t->clock_samples_read() - read << " of " << kLaunches / DeviceClock::kEvery << " samples read";
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamDestroy, s));
}

// A recorded run keeps every 8th launch's device time: tierrt-replay models
// each launch from the recording.
TEST(PolicyThreadStepsRecorded, TheDeviceClockStaysDenseWhileTheRunIsRecorded) {
  const std::string trace = ::testing::TempDir() + "clock_period_recorded.trace";
  std::unique_ptr<Engine> e = planner_engine(trace);
  ASSERT_NE(nullptr, e);
  PolicyThread* t = e->planner_for_tests();
  ASSERT_NE(nullptr, t);
  policy::LaunchSeq seq = 1;
  t->post(policy::Event::alloc(0x7000'0000, 64u << 20));
  for (std::uint64_t i = 0; i < 12; ++i) post_step(*t, &seq, /*marked=*/true, i);
  ASSERT_TRUE(eventually([&] { return t->steps_learned() >= 11; })) << t->steps_learned() << " steps learned";
  EXPECT_EQ(0u, t->mispredictions());
  EXPECT_EQ(DeviceClock::kEvery, t->clock_period());
  e.reset();
  std::remove(trace.c_str());
}

}  // namespace
}  // namespace tierrt
