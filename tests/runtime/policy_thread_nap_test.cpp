// The policy thread naps when the job is idle and every post wakes it: no
// event is left unread in a napping thread's ring, whatever the interleaving
// of posts with the thread going to sleep (the napping protocol in
// runtime/policy_thread.h). A lost wake-up shows as messages never taken.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "runtime/policy_thread.h"
#include "tests/runtime/simdev_kernels.h"

namespace tierrt {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<Engine> planner_engine() {
  static testing_simdev::Kernels k;  // a context current on this thread
  static const bool ready = [] {
    testing_simdev::set_up(&k);
    return true;
  }();
  (void)ready;
  Settings s;
  std::string error;
  EXPECT_TRUE(read_settings(&s, &error)) << error;
  s.mode = Mode::Tier;
  s.policy = Policy::Planner;
  CUresult err = CUDA_SUCCESS;
  std::unique_ptr<Engine> e = Engine::create(s, &err);
  EXPECT_NE(nullptr, e) << "the engine did not start: " << err;
  return e;
}

// Waits up to `limit` for `done`; false when it never held.
template <class Done>
bool eventually(Done done, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Events the planner takes without acting on them: syncs of a stream.
policy::Event idle_event() { return policy::Event::sync(0); }

TEST(PolicyThreadNap, AnIdleThreadNapsAndAPostWakesIt) {
  std::unique_ptr<Engine> e = planner_engine();
  ASSERT_NE(nullptr, e);
  PolicyThread* t = e->planner_for_tests();
  ASSERT_NE(nullptr, t);
  ASSERT_TRUE(eventually([&] { return t->napping(); })) << "an idle policy thread kept polling";
  const std::uint64_t taken = t->messages_taken(), naps = t->naps();
  t->post(idle_event());
  EXPECT_TRUE(eventually([&] { return t->messages_taken() == taken + 1; })) << "a post did not wake the napping thread";
  EXPECT_TRUE(eventually([&] { return t->napping() && t->naps() > naps; })) << "it did not nap again";
}

TEST(PolicyThreadNap, NoPostIsLostWhileTheThreadGoesToSleep) {
  std::unique_ptr<Engine> e = planner_engine();
  ASSERT_NE(nullptr, e);
  PolicyThread* t = e->planner_for_tests();
  ASSERT_NE(nullptr, t);
  const std::uint64_t before = t->messages_taken(), naps_before = t->naps();
  // Four posters, each posting in bursts separated by pauses around the nap
  // threshold, so that posts land just before, while and after the thread
  // decides to nap.
  constexpr int kThreads = 4, kBursts = 60;
  std::atomic<std::uint64_t> posted{0};
  std::vector<std::thread> posters;
  for (int i = 0; i < kThreads; ++i)
    posters.emplace_back([&, i] {
      std::mt19937 rng(1234 + i);
      for (int b = 0; b < kBursts; ++b) {
        const int n = 1 + static_cast<int>(rng() % 3);
        for (int k = 0; k < n; ++k) {
          t->post(idle_event());
          posted.fetch_add(1, std::memory_order_relaxed);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(1500 + rng() % 1500));
      }
    });
  for (auto& p : posters) p.join();
  EXPECT_TRUE(eventually([&] { return t->messages_taken() - before == posted.load(); }))
      << (posted.load() - (t->messages_taken() - before)) << " of " << posted.load()
      << " posts never taken: a wake-up was lost";
  EXPECT_EQ(0u, t->dropped());
  EXPECT_GT(t->naps(), naps_before) << "the thread never napped: the test did not reach the protocol";
}

}  // namespace
}  // namespace tierrt
