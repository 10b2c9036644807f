// The policy thread naps when the job is idle and every post wakes it: no
// event is left unread in a napping thread's ring, whatever the interleaving
// of posts with the thread going to sleep (the napping protocol in
// runtime/policy_thread.h). A lost wake-up shows as messages never taken.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "runtime/policy_thread.h"
#include "tests/runtime/planner_engine.h"

namespace tierrt {
namespace {

using testing_planner::eventually;
using testing_planner::planner_engine;

using Clock = std::chrono::steady_clock;

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

// A burst of posts to a napping thread: the first wakes it and clears the
// flag, the others find it cleared. With every post that saw the flag
// waking the thread (until the thread, being scheduled, cleared it itself),
// each launching thread paid a futex call per post of that window: 9 per
// idle spell in launch_hook_bench, 2 us each on average there.
TEST(PolicyThreadNap, ABurstOfPostsWakesANappingThreadOnce) {
  std::unique_ptr<Engine> e = planner_engine();
  ASSERT_NE(nullptr, e);
  PolicyThread* t = e->planner_for_tests();
  ASSERT_NE(nullptr, t);
  for (int round = 0; round < 5; ++round) {
    ASSERT_TRUE(eventually([&] { return t->napping(); })) << "an idle policy thread kept polling";
    const std::uint64_t taken = t->messages_taken(), calls = t->wake_calls(), naps = t->naps();
    constexpr int kBurst = 2000;
    for (int i = 0; i < kBurst; ++i) t->post(idle_event());
    EXPECT_TRUE(eventually([&] { return t->messages_taken() == taken + kBurst; }));
    // One per nap the burst met: the burst may outlast the nap threshold on
    // a loaded machine, and the thread then naps again within it.
    EXPECT_LE(t->wake_calls() - calls, t->naps() - naps + 1) << "round " << round;
  }
}

// Launches keep coming but the planner has no plan yet (it learns): the
// thread takes them every kCalmPollNs, not every kPollNs, since each of its
// wake-ups costs the launching threads their CPU.
TEST(PolicyThreadNap, WithNoMoveAheadTheThreadPollsCalmly) {
  std::unique_ptr<Engine> e = planner_engine();
  ASSERT_NE(nullptr, e);
  PolicyThread* t = e->planner_for_tests();
  ASSERT_NE(nullptr, t);
  const std::uint64_t taken = t->messages_taken(), turns = t->turns();
  const auto start = Clock::now();
  std::uint64_t posted = 0;
  // Never idle for kNapAfterNs: the thread stays awake and polls.
  while (Clock::now() - start < std::chrono::milliseconds(60)) {
    t->post(idle_event());
    ++posted;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  const std::uint64_t polled = t->turns() - turns;
  EXPECT_TRUE(eventually([&] { return t->messages_taken() - taken == posted; }));
  // At kPollNs it would be ms * 20; a turn ends early only when the ring is
  // ready as it goes to sleep, and the stop and waking add a few.
  EXPECT_LE(static_cast<double>(polled), 2 * ms + 10) << polled << " turns in " << ms << " ms";
  EXPECT_GT(polled, 0u);
}

TEST(PolicyThreadNap, NoPostIsLostWhileTheThreadGoesToSleep) {
  std::unique_ptr<Engine> e = planner_engine();
  ASSERT_NE(nullptr, e);
  PolicyThread* t = e->planner_for_tests();
  ASSERT_NE(nullptr, t);
  const std::uint64_t before = t->messages_taken(), naps_before = t->naps();
  // Four posters, each posting in bursts separated by pauses around the nap
  // threshold, so that posts land just before, while and after the thread
  // decides to nap. Every tenth burst they all pause together for longer
  // than the threshold, so that the thread does nap (the others' posts could
  // otherwise keep it from ever being idle that long) and posts wake it.
  constexpr int kThreads = 4, kBursts = 60;
  std::atomic<std::uint64_t> posted{0};
  std::barrier together(kThreads);
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
        if (b % 10 == 9) {
          together.arrive_and_wait();
          std::this_thread::sleep_for(std::chrono::microseconds(2500 + rng() % 1000));
          continue;
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
