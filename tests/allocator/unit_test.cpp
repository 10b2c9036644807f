// Allocator parts that need no driver: granule table, size-ordered cache,
// state machine transitions, budgets.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "allocator/block.h"
#include "allocator/block_cache.h"
#include "allocator/budget.h"
#include "allocator/granule_table.h"
#include "allocator/tick_clock.h"

namespace tierrt::alloc {
namespace {

constexpr std::uintptr_t kG = 2u << 20;

TEST(GranuleTable, FindsBlocksAndInteriorPointers) {
  GranuleTable t(21);
  const std::uintptr_t a = 0x7f0000000000, b = a + 8 * kG;
  ASSERT_TRUE(t.insert(a, 3 * kG, 0x1000));
  ASSERT_TRUE(t.insert(b, kG, 0x2000));
  EXPECT_EQ(t.find(a), 0x1000u);
  EXPECT_EQ(t.find(a + 1), 0x1000u);
  EXPECT_EQ(t.find(a + 3 * kG - 1), 0x1000u);
  EXPECT_EQ(t.find(a + 3 * kG), 0u);
  EXPECT_EQ(t.find(b + kG / 2), 0x2000u);
  EXPECT_EQ(t.find(a - 1), 0u);
  t.erase(a, 3 * kG);
  EXPECT_EQ(t.find(a + kG), 0u);
  EXPECT_EQ(t.find(b), 0x2000u);
}

TEST(GranuleTable, SpansLeafBoundaries) {
  GranuleTable t(21);
  const std::uintptr_t a = (std::uintptr_t{5} << 30) - 2 * kG;  // crosses a 1 GiB leaf
  ASSERT_TRUE(t.insert(a, 4 * kG, 7));
  for (std::uintptr_t p = a; p < a + 4 * kG; p += kG / 4) EXPECT_EQ(t.find(p), 7u);
  EXPECT_EQ(t.find(a + 4 * kG), 0u);
}

TEST(GranuleTable, RejectsUnalignedAndOutOfRange) {
  GranuleTable t(21);
  EXPECT_FALSE(t.insert(kG + 4096, kG, 1));
  EXPECT_FALSE(t.insert(kG, kG + 1, 1));
  EXPECT_FALSE(t.insert(std::uintptr_t{1} << 48, kG, 1));
  EXPECT_EQ(t.find(std::uintptr_t{1} << 50), 0u);
  EXPECT_EQ(t.find(0), 0u);
}

TEST(GranuleTable, ConcurrentReadersSeeWholeEntries) {
  GranuleTable t(21);
  const std::uintptr_t base = std::uintptr_t{3} << 40;
  std::atomic<bool> stop{false};
  std::atomic<long> bad{0};
  std::thread reader([&] {
    while (!stop.load()) {
      for (int i = 0; i < 64; ++i) {
        const std::uintptr_t v = t.find(base + i * kG + 12345);
        if (v != 0 && v != static_cast<std::uintptr_t>(1000 + i)) bad++;
      }
    }
  });
  for (int round = 0; round < 2000; ++round)
    for (int i = 0; i < 64; ++i) {
      t.insert(base + i * kG, kG, 1000 + i);
      if (round & 1) t.erase(base + i * kG, kG);
    }
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
}

Block* make(std::deque<Block>& store, std::size_t mapped, CUstream s = nullptr) {
  store.emplace_back();
  Block* b = &store.back();
  b->mapped = mapped;
  b->free_stream = s;
  return b;
}

TEST(BlockCache, BestFitWithinAnEighth) {
  std::deque<Block> store;
  BlockCache c;
  c.insert(make(store, 4 * kG));
  c.insert(make(store, 8 * kG));
  c.insert(make(store, 16 * kG));
  EXPECT_EQ(c.bytes(), 28 * kG);
  EXPECT_EQ(c.take(2 * kG, nullptr), nullptr);     // 4 > 2 + 2/8
  Block* b = c.take(8 * kG, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->mapped, 8 * kG);
  EXPECT_EQ(c.take(15 * kG, nullptr)->mapped, 16 * kG);  // 16 <= 15 + 15/8
  EXPECT_EQ(c.count(), 1u);
  EXPECT_EQ(c.bytes(), 4 * kG);
  EXPECT_EQ(c.largest()->mapped, 4 * kG);
  c.erase(c.largest());
  EXPECT_TRUE(c.empty());
}

TEST(BlockCache, PrefersTheSameStreamAmongEqualSizes) {
  std::deque<Block> store;
  BlockCache c;
  auto s1 = reinterpret_cast<CUstream>(0x10), s2 = reinterpret_cast<CUstream>(0x20);
  c.insert(make(store, kG, s1));
  c.insert(make(store, kG, s2));
  c.insert(make(store, kG, s1));
  EXPECT_EQ(c.take(kG, s2)->free_stream, s2);
  EXPECT_EQ(c.take(kG, s2)->free_stream, s1);  // none left on s2: any
  EXPECT_EQ(c.count(), 1u);
  while (!c.empty()) c.erase(c.largest());
}

TEST(StateMachine, TransitionsAreExactlyTheDesignedOnes) {
  const State all[] = {State::Resident, State::Spilling, State::Spilled, State::Fetching,
                       State::Freed};
  auto ok = [](State a, State b) {
    using S = State;
    return (a == S::Resident && (b == S::Spilling || b == S::Freed)) ||
           (a == S::Spilling && (b == S::Spilled || b == S::Resident)) ||
           (a == S::Spilled && (b == S::Fetching || b == S::Freed)) ||
           (a == S::Fetching && (b == S::Resident || b == S::Spilled)) ||
           (a == S::Freed && (b == S::Resident || b == S::Spilled));
  };
  for (State a : all)
    for (State b : all)
      EXPECT_EQ(legal_transition(a, b), ok(a, b)) << state_name(a) << " -> " << state_name(b);
  // Device memory is never dropped without a copy: RESIDENT cannot become
  // SPILLED directly, nor SPILLED become RESIDENT without a fetch.
  EXPECT_FALSE(legal_transition(State::Resident, State::Spilled));
  EXPECT_FALSE(legal_transition(State::Spilled, State::Resident));
  // FREED -> SPILLED holds no bytes yet: an untouched granule-group member
  // placed on the host (BlockStates::set_state asserts that it is one).
}

TEST(Budget, ReservesWithinTheLimitAndTracksThePeak) {
  Budget b(100);
  EXPECT_TRUE(b.try_reserve(60));
  EXPECT_FALSE(b.try_reserve(41));
  EXPECT_TRUE(b.try_reserve(40));
  EXPECT_EQ(b.available(), 0u);
  b.release(70);
  EXPECT_EQ(b.used(), 30u);
  EXPECT_EQ(b.peak(), 100u);
  EXPECT_TRUE(b.try_reserve(70));
  EXPECT_EQ(b.used(), 100u);
  EXPECT_EQ(b.available(), 0u);
  EXPECT_FALSE(b.try_reserve(1));
  EXPECT_FALSE(Budget(10).try_reserve(UINT64_MAX));
}

TEST(Budget, ConcurrentReservationsNeverExceedTheLimit) {
  Budget b(1000);
  std::atomic<long> granted{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 10000; ++i)
        if (b.try_reserve(7)) {
          granted++;
          if (i % 3 == 0) {
            b.release(7);
            granted--;
          }
        }
    });
  for (auto& t : ts) t.join();
  EXPECT_LE(b.used(), 1000u);
  EXPECT_EQ(b.used(), static_cast<std::uint64_t>(granted.load()) * 7);
  EXPECT_LE(b.peak(), 1000u);
}

// The lazy-use window's clock: wherever it reads the CPU's counter, its rate
// matches the host's clock closely enough to time a window (the window needs
// no precision: a factor of two either way is far inside what this checks
// against, a wrong rate by 10x or more is what it catches).
TEST(TickClock, TicksAtTheRateItWasCalibratedTo) {
  TickClock c;
  c.calibrate();
  const std::uint64_t ns0 = steady_ns(), t0 = c.now();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::uint64_t ns = steady_ns() - ns0, ticks = c.now() - t0;
  ASSERT_GT(ticks, 0u);
  const double per_ns = static_cast<double>(ticks) / static_cast<double>(ns);
  EXPECT_GT(per_ns, c.ticks_per_ns() * 0.5) << "uses counter: " << c.uses_counter();
  EXPECT_LT(per_ns, c.ticks_per_ns() * 2.0) << "uses counter: " << c.uses_counter();
  EXPECT_EQ(c.ticks_in(UINT64_MAX), UINT64_MAX);  // "never" stays never
  EXPECT_EQ(c.ticks_in(0), 0u);
}

// The rate is measured from readings of both clocks taken together: a
// thread preempted between its two clocks' reads (here 10 ms lost just
// before the first counter read, and again before the third, the end's
// first try) gets a reading that is dropped, not one that pairs a time
// with a tick count 10 ms later (which made the rate come out near 0).
TEST(TickClock, ARateMeasuredAcrossAPreemptionIsTheTrueOne) {
  constexpr double kTicksPerNs = 2.5;
  std::uint64_t host_ns = 1'000'000'000;  // the fake host clock
  int counter_reads = 0;
  auto steady = [&] { return host_ns += 100; };
  auto counter = [&] {
    if (++counter_reads == 1 || counter_reads == 3) host_ns += 10'000'000;
    return static_cast<std::uint64_t>(static_cast<double>(host_ns) * kTicksPerNs);
  };
  const double rate = measure_counter_rate(steady, counter, 500'000);
  EXPECT_NEAR(rate, kTicksPerNs, kTicksPerNs * 0.01);
  EXPECT_EQ(counter_reads, 4) << "each preempted reading is taken again";
  // A host clock that never reads twice within kPairedWithinNs: no rate.
  auto slow_steady = [&] { return host_ns += 2 * kPairedWithinNs; };
  EXPECT_EQ(measure_counter_rate(slow_steady, counter, 500'000), 0.0);
}

TEST(TickClock, WithoutTheCounterItIsTheHostsClockInNanoseconds) {
  TickClock c;
  c.calibrate(/*allow_counter=*/false);
  EXPECT_FALSE(c.uses_counter());
  EXPECT_EQ(c.ticks_in(20'000), 20'000u);
  const std::uint64_t before = steady_ns(), t = c.now(), after = steady_ns();
  EXPECT_LE(before, t);
  EXPECT_LE(t, after);
}

#if defined(__x86_64__) || defined(__aarch64__)
// Where the CPU has a fixed-rate counter (every x86-64 CPU of the last
// decade, every aarch64 one) the window reads it, not clock_gettime.
TEST(TickClock, UsesTheCpusCounterWhereItRunsAtAFixedRate) {
  TickClock c;
  c.calibrate();
  if (!c.uses_counter()) GTEST_SKIP() << "this CPU does not say its counter runs at a fixed rate";
  EXPECT_GT(c.ticks_per_ns(), 0.001);  // at least 1 MHz
  EXPECT_LT(c.ticks_per_ns(), 100.0);  // at most 100 GHz
}
#endif

}  // namespace
}  // namespace tierrt::alloc
