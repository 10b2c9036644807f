// Launch announcements (allocator/launch_announcements.h): what a launch
// announces is seen until it ends, nested and oversized launches are not
// announced, a thread's slot goes back when it exits, and the pairing with a
// taker (publish, then look) never lets both a launch and a spill have the
// same block (run under TSan in CI).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

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

// Each round a launcher (announce, then look at the state; it keeps the
// announcement until the taker has looked) and a taker (publish SPILLING,
// then look for an announcement) race for one block: never may the launcher
// have seen RESIDENT while the taker saw no announcement. With either side's
// store not sequentially consistent, a store buffer lets both through.
TEST(LaunchAnnouncements, ALaunchAndASpillNeverBothHaveTheBlock) {
  constexpr int kRounds = 20000;
  Block b;
  std::atomic<int> round{-1}, checked{0}, done{0};
  std::atomic<bool> went{false};
  std::thread launcher([&] {
    Block* named[] = {&b};
    for (int r = 0; r < kRounds; ++r) {
      while (round.load(std::memory_order_acquire) != r) {
      }
      const bool announced = LaunchAnnouncements::begin(named);
      went.store(announced && b.state.load(std::memory_order_seq_cst) == State::Resident, std::memory_order_relaxed);
      while (checked.load(std::memory_order_acquire) != r + 1) {
      }
      if (announced) LaunchAnnouncements::end();
      done.store(r + 1, std::memory_order_release);
    }
  });
  int both = 0, launches = 0, takes = 0;
  for (int r = 0; r < kRounds; ++r) {
    b.state.store(State::Resident, std::memory_order_seq_cst);
    round.store(r, std::memory_order_release);
    b.state.store(State::Spilling, std::memory_order_seq_cst);
    const bool took = !LaunchAnnouncements::announced(&b);
    checked.store(r + 1, std::memory_order_release);
    while (done.load(std::memory_order_acquire) != r + 1) {
    }
    const bool launched = went.load(std::memory_order_relaxed);
    both += took && launched;
    launches += launched;
    takes += took;
  }
  launcher.join();
  EXPECT_EQ(both, 0) << "a spill and a launch both had the block";
  EXPECT_GT(launches + takes, 0);
}

}  // namespace
}  // namespace tierrt::alloc
