// The lock-order witness: RankedMutex works with the standard lock types and
// condition variables, and in builds with assertions an acquisition out of
// rank order aborts, naming both locks.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "allocator/lock_rank.h"
#include "allocator/ranked_mutex.h"

namespace tierrt::alloc {
namespace {

TEST(RankedMutex, LocksInRankOrderAndWaitsOnConditionVariables) {
  RankedMutex blocks(kRankBlocks, "alloc.blocks"), uses(kRankUses, "alloc.uses");
  {
    std::lock_guard<RankedMutex> a(blocks);
    std::lock_guard<RankedMutex> b(uses);
  }
  {
    std::unique_lock<RankedMutex> b(uses);  // alone, any rank may be taken
  }
  // A condition variable releases and retakes it; taking a higher rank after
  // the wait is still in order.
  std::condition_variable_any cv;
  bool ready = false;
  std::thread t([&] {
    std::lock_guard<RankedMutex> g(blocks);
    ready = true;
    cv.notify_all();
  });
  {
    std::unique_lock<RankedMutex> l(blocks);
    cv.wait(l, [&] { return ready; });
    std::lock_guard<RankedMutex> g(uses);
  }
  t.join();
  ASSERT_TRUE(blocks.try_lock());
  blocks.unlock();
}

// Debug builds check every acquisition: one out of order aborts at once,
// naming both locks (the lock held and the lock wanted).
TEST(RankedMutexDeathTest, OutOfOrderAcquisitionAbortsNamingBothLocks) {
#ifdef NDEBUG
  GTEST_SKIP() << "the lock-order witness is compiled out (NDEBUG)";
#else
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  RankedMutex blocks(kRankBlocks, "alloc.blocks"), uses(kRankUses, "alloc.uses");
  EXPECT_DEATH(
      {
        std::lock_guard<RankedMutex> a(uses);
        std::lock_guard<RankedMutex> b(blocks);
      },
      "taking \"alloc.blocks\" \\(rank 30\\) while holding \"alloc.uses\" \\(rank 50\\)");
  // The same lock twice (a self-deadlock) is out of order too.
  EXPECT_DEATH(
      {
        std::lock_guard<RankedMutex> a(blocks);
        std::lock_guard<RankedMutex> b(blocks);
      },
      "taking \"alloc.blocks\" .* while holding \"alloc.blocks\"");
#endif
}

}  // namespace
}  // namespace tierrt::alloc
