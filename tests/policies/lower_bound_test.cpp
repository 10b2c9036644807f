// The lower bound on hand-built steps where the answer can be worked out on paper.
#include <gtest/gtest.h>

#include "policies/eval/lower_bound.hpp"
#include "policies/eval/trace_steps.hpp"

namespace tierrt::policy {
namespace {

constexpr std::uint64_t kMB = 1'000'000;
const LinkModel kLink{"1GB/s", 1e9, 1e9};  // 1 MB per ms each way

// A: 100 MB written by launch 0, read again by launch 3; B: 100 MB allocated for
// launch 1 only. Every launch takes 10 ms.
StepTimeline two_blocks() {
  Trace t{Event::step(0), Event::alloc(1, 100 * kMB)};
  for (LaunchSeq i = 0; i < 4; ++i) {
    if (i == 1) t.push_back(Event::alloc(2, 100 * kMB));
    t.push_back(Event::launch(i, 10'000'000));
    if (i == 0 || i == 3) t.push_back(Event::use(1, i));
    if (i == 1) t.push_back(Event::use(2, i)), t.push_back(Event::free(2));
  }
  t.push_back(Event::free(1));
  return analyse_trace(t).steps.at(0);
}

TEST(LowerBound, NoExcessNoStall) {
  const auto tl = two_blocks();
  const auto lb = lower_bound(tl, 200 * kMB, kLink);
  EXPECT_TRUE(lb.feasible);
  EXPECT_DOUBLE_EQ(lb.compute_ns, 40e6);
  EXPECT_DOUBLE_EQ(lb.stall_ns, 0);
}

TEST(LowerBound, OutboundAndReturnStallsAdd) {
  // At 150 MB, 50 MB of A must be gone before launch 1 starts (t = 10 ms): the D2H
  // takes 50 ms, so at least 40 ms of stall before launch 1. Those 50 MB must be back
  // by launch 3, which starts 20 ms after launch 1 without stalls: the H2D takes
  // 50 ms, so at least 30 ms more between launch 1 and launch 3. The two stretches
  // do not overlap, so both are paid: 70 ms (the larger alone, 40 ms, was too low).
  const auto lb = lower_bound(two_blocks(), 150 * kMB, kLink);
  EXPECT_TRUE(lb.feasible);
  EXPECT_NEAR(lb.stall_ns, 70e6, 1);
}

TEST(LowerBound, OutboundAloneWhenTheReturnHides) {
  // A fast return link: 50 MB back in 0.5 ms hides within the 20 ms before launch 3;
  // only the outbound 40 ms remain.
  const LinkModel fast_back{"asym", 100e9, 1e9};
  const auto lb = lower_bound(two_blocks(), 150 * kMB, fast_back);
  EXPECT_NEAR(lb.stall_ns, 40e6, 1);
}

TEST(LowerBound, ReturnCopyThatCannotHide) {
  // Slow H2D only: the 50 MB off at launch 1 must be back by launch 3, 20 ms later,
  // and takes 100 ms at 0.5 GB/s: at least 80 ms of stall.
  const LinkModel slow_back{"asym", 0.5e9, 100e9};
  const auto lb = lower_bound(two_blocks(), 150 * kMB, slow_back);
  EXPECT_NEAR(lb.stall_ns, 80e6, 1);
}

TEST(LowerBound, BudgetBelowOneLaunchIsInfeasible) {
  EXPECT_FALSE(lower_bound(two_blocks(), 90 * kMB, kLink).feasible);
}

// A lazy block (a granule-group member) holds nothing until first used: where
// the device has no room it starts on the host with no copy out. A: 100 MB
// read by launches 0..2, then freed; L: 100 MB, lazy, first used by launch 3.
// At 150 MB nothing needs to cross the D2H engine (L starts on the host);
// 50 MB of L must come back between the peak (launch 0) and launch 3, 30 ms
// later, at 1 GB/s: 20 ms of stall. Counting L as bytes to copy out would
// make it 70 ms, more than a schedule that leaves L on the host pays.
TEST(LowerBound, ALazyBlockNotUsedYetNeedsNoCopyOut) {
  Trace t{Event::step(0), Event::alloc(1, 100 * kMB), Event::alloc(2, 100 * kMB, 0, /*lazy=*/true)};
  for (LaunchSeq i = 0; i < 4; ++i) {
    t.push_back(Event::launch(i, 10'000'000));
    t.push_back(Event::use(i < 3 ? 1 : 2, i));
    if (i == 2) t.push_back(Event::free(1));
  }
  t.push_back(Event::free(2));
  const auto lb = lower_bound(analyse_trace(t).steps.at(0), 150 * kMB, kLink);
  EXPECT_TRUE(lb.feasible);
  EXPECT_NEAR(lb.stall_ns, 20e6, 1);
}

}  // namespace
}  // namespace tierrt::policy
