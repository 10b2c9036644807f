// The prefetches the policy thread arms for the launching threads
// (runtime/armed_prefetches.h): due after their launch and not before,
// carried out once whoever gets there, left alone when their block changed
// address, and disarmed once launches passed them.
#include "runtime/armed_prefetches.h"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

namespace tierrt {
namespace {

// As the policy thread asks it (there under the allocator's lock): the block
// is still the one at the address it was armed with.
bool still_at(alloc::Block* b, CUdeviceptr va) { return b->va == va; }

struct Taken {
  std::vector<alloc::Block*> blocks;
  auto fn() {
    return [this](alloc::Block* b) { blocks.push_back(b); };
  }
};

TEST(ArmedPrefetches, AreDueAfterTheirLaunchAndTakenOnce) {
  ArmedPrefetches a;
  alloc::Block b;
  b.va = 0x1000;
  EXPECT_FALSE(a.due(0)) << "nothing armed: every launch's check says so";
  ASSERT_TRUE(a.arm(&b, b.va, 10));
  a.publish();
  EXPECT_FALSE(a.due(9));
  EXPECT_TRUE(a.due(10));
  Taken t;
  a.run_due(9, still_at, t.fn());
  EXPECT_TRUE(t.blocks.empty()) << "not before launch 10 went out";
  a.run_due(10, still_at, t.fn());
  ASSERT_EQ(t.blocks.size(), 1u);
  EXPECT_EQ(t.blocks[0], &b);
  a.run_due(11, still_at, t.fn());
  EXPECT_EQ(t.blocks.size(), 1u) << "taken once";
  EXPECT_EQ(a.armed(), 0u);
  a.publish();
  EXPECT_FALSE(a.due(100));
}

// publish and disarm_passed skip the slots once a scan found none armed:
// what is armed after that is still published and disarmed.
TEST(ArmedPrefetches, ThoseArmedAfterTheTableEmptiedArePublishedAndDisarmed) {
  ArmedPrefetches a;
  alloc::Block b, c;
  b.va = 0x1000;
  c.va = 0x2000;
  a.publish();
  a.disarm_passed(5);
  ASSERT_TRUE(a.arm(&b, b.va, 10));
  a.publish();
  EXPECT_TRUE(a.due(10));
  Taken t;
  a.run_due(10, still_at, t.fn());
  a.publish();
  EXPECT_FALSE(a.due(100)) << "the table emptied";
  ASSERT_TRUE(a.arm(&c, c.va, 20));
  a.publish();
  EXPECT_FALSE(a.due(19));
  EXPECT_TRUE(a.due(20)) << "armed after the table emptied: published";
  a.disarm_passed(21);
  EXPECT_EQ(a.armed(), 0u) << "and disarmed once launches passed it";
  a.publish();
  EXPECT_FALSE(a.due(100));
}

TEST(ArmedPrefetches, ABlockArmedTwiceIsArmedOnce) {
  ArmedPrefetches a;
  alloc::Block b;
  b.va = 0x1000;
  EXPECT_TRUE(a.arm(&b, b.va, 10));
  EXPECT_FALSE(a.arm(&b, b.va, 12));
  EXPECT_EQ(a.armed(), 1u);
}

TEST(ArmedPrefetches, AFullTableRefusesMore) {
  ArmedPrefetches a;
  std::deque<alloc::Block> blocks(ArmedPrefetches::kSlots + 1);
  for (std::size_t i = 0; i < ArmedPrefetches::kSlots; ++i) EXPECT_TRUE(a.arm(&blocks[i], blocks[i].va, i));
  EXPECT_FALSE(a.arm(&blocks.back(), blocks.back().va, 0));
  EXPECT_EQ(a.armed(), ArmedPrefetches::kSlots);
}

// Blocks are type-stable: one freed and reused since it was armed is
// another allocation now, not the plan's.
TEST(ArmedPrefetches, ABlockAtAnotherAddressSinceItWasArmedIsLeftAlone) {
  ArmedPrefetches a;
  alloc::Block b;
  b.va = 0x1000;
  ASSERT_TRUE(a.arm(&b, b.va, 5));
  a.publish();
  b.va = 0x2000;
  Taken t;
  a.run_due(5, still_at, t.fn());
  EXPECT_TRUE(t.blocks.empty());
  EXPECT_EQ(a.armed(), 0u);
}

TEST(ArmedPrefetches, ThoseLaunchesPassedAreDisarmed) {
  ArmedPrefetches a;
  alloc::Block early, due_now;
  ASSERT_TRUE(a.arm(&early, early.va, 3));
  ASSERT_TRUE(a.arm(&due_now, due_now.va, 4));
  a.disarm_passed(4);
  EXPECT_EQ(a.armed(), 1u) << "only those due before launch 4";
  a.publish();
  Taken t;
  a.run_due(4, still_at, t.fn());
  ASSERT_EQ(t.blocks.size(), 1u);
  EXPECT_EQ(t.blocks[0], &due_now);
}

// One producer arming as slots free up, four launching threads taking what
// is due: every prefetch armed is carried out exactly once.
TEST(ArmedPrefetches, LaunchingThreadsTakeEachArmedPrefetchExactlyOnce) {
  ArmedPrefetches a;
  constexpr int kBlocks = 48, kArms = 20000;
  std::unique_ptr<alloc::Block[]> blocks(new alloc::Block[kBlocks]);
  std::vector<std::atomic<int>> taken(kBlocks);
  std::atomic<std::uint64_t> launch{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> launchers;
  for (int t = 0; t < 4; ++t)
    launchers.emplace_back([&] {
      for (;;) {
        const bool last = done.load();
        a.run_due(launch.fetch_add(1), still_at, [&](alloc::Block* b) { taken[b - &blocks[0]].fetch_add(1); });
        if (last) return;
      }
    });
  int armed = 0;
  for (int i = 0; armed < kArms; ++i) {
    alloc::Block* b = &blocks[i % kBlocks];
    if (a.arm(b, b->va, launch.load() + static_cast<std::uint64_t>(i % 7))) ++armed;
    a.publish();
  }
  // Every launch from now on is past every prefetch armed.
  while (a.armed() != 0) std::this_thread::yield();
  done = true;
  for (auto& t : launchers) t.join();
  int sum = 0;
  for (auto& n : taken) sum += n.load();
  EXPECT_EQ(sum, kArms);
}

}  // namespace
}  // namespace tierrt
