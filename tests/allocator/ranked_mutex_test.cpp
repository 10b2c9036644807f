// The lock-order witness: RankedMutex works with the standard lock types and
// condition variables, and in builds with assertions an acquisition out of
// rank order aborts, naming both locks.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <shared_mutex>
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

// The shared mutex (the runtime's capture-begin lock) takes part in the same
// order, read or written: a reader holding it may take a higher rank, and
// one holding a higher rank may not read it.
TEST(RankedSharedMutex, ReadersAndWritersKeepTheOrder) {
  RankedSharedMutex begin(5, "runtime.capture_begin");
  RankedMutex blocks(kRankBlocks, "alloc.blocks");
  {
    std::shared_lock<RankedSharedMutex> r1(begin);
    std::lock_guard<RankedMutex> g(blocks);
  }
  {
    std::unique_lock<RankedSharedMutex> w(begin);
    std::lock_guard<RankedMutex> g(blocks);
  }
  // Two readers at once, on two threads.
  std::shared_lock<RankedSharedMutex> mine(begin);
  std::thread t([&] {
    ASSERT_TRUE(begin.try_lock_shared());
    begin.unlock_shared();
    EXPECT_FALSE(begin.try_lock());
  });
  t.join();
}

TEST(RankedMutexDeathTest, ASharedLockOutOfOrderAbortsToo) {
#ifdef NDEBUG
  GTEST_SKIP() << "the lock-order witness is compiled out (NDEBUG)";
#else
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  RankedSharedMutex begin(5, "runtime.capture_begin");
  RankedMutex blocks(kRankBlocks, "alloc.blocks");
  EXPECT_DEATH(
      {
        std::lock_guard<RankedMutex> g(blocks);
        std::shared_lock<RankedSharedMutex> r(begin);
      },
      "taking \"runtime.capture_begin\" \\(rank 5\\) while holding \"alloc.blocks\" \\(rank 30\\)");
#endif
}

// A lock of another kind (the node ledger's process-shared mutex) joins the
// witness by its LockId.
TEST(RankedMutexDeathTest, ALockOfAnotherKindJoinsByItsId) {
#ifdef NDEBUG
  GTEST_SKIP() << "the lock-order witness is compiled out (NDEBUG)";
#else
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  static constexpr LockId ledger{200, "node.ledger"};
  RankedMutex blocks(kRankBlocks, "alloc.blocks");
  {
    std::lock_guard<RankedMutex> g(blocks);
    lock_witness::check(ledger);
    lock_witness::push(ledger);
    lock_witness::pop(ledger);
  }
  EXPECT_EQ(lock_witness::held.depth, 0);
  EXPECT_DEATH(
      {
        lock_witness::check(ledger);
        lock_witness::push(ledger);
        std::lock_guard<RankedMutex> g(blocks);
      },
      "taking \"alloc.blocks\" \\(rank 30\\) while holding \"node.ledger\" \\(rank 200\\)");
#endif
}

}  // namespace
}  // namespace tierrt::alloc
