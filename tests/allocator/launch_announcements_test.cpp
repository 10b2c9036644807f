// Launch announcements (allocator/launch_announcements.h): what a launch
// announces is seen until it ends, nested and oversized launches are not
// announced, a thread's slot goes back when it exits, and the pairing with a
// taker (publish, then look) never lets both a launch and a spill have the
// same block (run under TSan in CI, where both sides fence), and the
// launch side's barrier is only a compiler barrier where membarrier works.
#include <gtest/gtest.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "allocator/asymmetric_fence.h"
#include "allocator/launch_announcements.h"

namespace tierrt::alloc {
namespace {

TEST(LaunchAnnouncements, AnAnnouncedBlockIsSeenUntilTheLaunchEnds) {
  Block a, b, c;
  Block* named[] = {&a, &b};
  ASSERT_TRUE(LaunchAnnouncements::begin(named));
  EXPECT_TRUE(LaunchAnnouncements::announced(&a));
  EXPECT_TRUE(LaunchAnnouncements::announced(&b));
  EXPECT_FALSE(LaunchAnnouncements::announced(&c));
  EXPECT_TRUE(held_by_launch(&a));
  Block* inner[] = {&c};
  EXPECT_FALSE(LaunchAnnouncements::begin(inner)) << "a nested launch must pin";
  LaunchAnnouncements::end();
  EXPECT_FALSE(LaunchAnnouncements::announced(&a));
  EXPECT_FALSE(held_by_launch(&b));
}

TEST(LaunchAnnouncements, ALaunchNamingMoreBlocksThanASlotHoldsIsNotAnnounced) {
  std::vector<Block> blocks(LaunchAnnouncements::kBlocks + 1);
  std::vector<Block*> named;
  for (Block& b : blocks) named.push_back(&b);
  EXPECT_FALSE(LaunchAnnouncements::begin(named));
  EXPECT_FALSE(LaunchAnnouncements::announced(&blocks[0]));
}

TEST(LaunchAnnouncements, AnotherThreadSeesTheAnnouncementAndExitingThreadsGiveTheirSlotsBack) {
  Block a;
  const std::size_t before = LaunchAnnouncements::slots_in_use();
  std::atomic<int> phase{0};
  std::thread launcher([&] {
    Block* named[] = {&a};
    ASSERT_TRUE(LaunchAnnouncements::begin(named));
    phase = 1;
    while (phase.load() != 2) std::this_thread::yield();
    LaunchAnnouncements::end();
  });
  while (phase.load() != 1) std::this_thread::yield();
  EXPECT_TRUE(LaunchAnnouncements::announced(&a));
  phase = 2;
  launcher.join();
  EXPECT_FALSE(LaunchAnnouncements::announced(&a));
  EXPECT_EQ(LaunchAnnouncements::slots_in_use(), before) << "the exited thread kept its slot";
}

// Spins for `n` rounds of nothing the compiler may drop: how the two sides
// of a round are skewed against each other.
void spin(unsigned n) noexcept {
  for (unsigned i = 0; i < n; ++i) asm volatile("" ::: "memory");
}

// Spins on `c` until it holds `v`, then yields: on a machine with fewer
// free cores than spinning threads, a pure spin holds the other side off
// for a whole time slice.
void await(const std::atomic<int>& c, int v) noexcept {
  for (int n = 0; c.load(std::memory_order_acquire) != v; ++n)
    if (n > 1000) std::this_thread::yield();
}

// Each round a launcher (announce, then look at the state; it keeps the
// announcement until the taker has looked) and a taker (publish SPILLING,
// then look for an announcement) race for one block: never may the launcher
// have seen RESIDENT while the taker saw no announcement. Each side starts
// after a pseudo-random spin, so that over the rounds their stores land
// within a store buffer's drain of each other: with no barrier between a
// side's store and its load (asymmetric_fence.h), both get through.
TEST(LaunchAnnouncements, ALaunchAndASpillNeverBothHaveTheBlock) {
  constexpr int kRounds = 20000;
  Block b;
  std::atomic<int> round{-1}, checked{0}, done{0};
  std::atomic<bool> went{false};
  std::thread launcher([&] {
    Block* named[] = {&b};
    unsigned x = 12345;
    for (int r = 0; r < kRounds; ++r) {
      await(round, r);
      x = x * 1103515245u + 12345u;
      spin((x >> 16) % 64);
      const bool announced = LaunchAnnouncements::begin(named);
      went.store(announced && b.state.load(std::memory_order_seq_cst) == State::Resident, std::memory_order_relaxed);
      await(checked, r + 1);
      if (announced) LaunchAnnouncements::end();
      done.store(r + 1, std::memory_order_release);
    }
  });
  int both = 0, launches = 0, takes = 0;
  unsigned x = 54321;
  for (int r = 0; r < kRounds; ++r) {
    b.state.store(State::Resident, std::memory_order_seq_cst);
    round.store(r, std::memory_order_release);
    x = x * 1103515245u + 12345u;
    spin((x >> 16) % 256);
    b.state.store(State::Spilling, std::memory_order_seq_cst);  // as BlockStates::set_state publishes
    const bool took = !LaunchAnnouncements::announced(&b);
    checked.store(r + 1, std::memory_order_release);
    await(done, r + 1);
    const bool launched = went.load(std::memory_order_relaxed);
    both += took && launched;
    launches += launched;
    takes += took;
  }
  launcher.join();
  EXPECT_EQ(both, 0) << "a spill and a launch both had the block";
  // Which side wins depends on the load: on a busy machine the launcher
  // rarely runs before the taker has published.
  EXPECT_GT(launches + takes, 0);
}

// The launch side's barrier is a compiler barrier wherever the kernel lets
// the process register membarrier: else every launch pays two locked
// instructions again, which no other test would notice.
TEST(AsymmetricFence, LaunchesTakeNoFenceWhereTheKernelOffersMembarrier) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "TSan builds fence both sides";
#endif
  const long offered = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0u, 0);
  if (offered < 0 || (offered & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
    GTEST_SKIP() << "this kernel offers no private expedited membarrier";
  EXPECT_TRUE(asymmetric_fence::membarrier_in_use());
  EXPECT_TRUE(asymmetric_fence::heavy()) << "the rare side's barrier failed";
}

}  // namespace
}  // namespace tierrt::alloc
