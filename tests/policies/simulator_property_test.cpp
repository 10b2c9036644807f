// Property tests on random step traces: for every policy, re-derive from the model's
// audit log that no launch ran with a block off the device, that device memory
// never exceeded the budget unless reported, that every wait for a spilled block is
// counted as a stall, and that no policy beats the lower bound.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "policies/eval/policy_comparison.hpp"
#include "policies/eval/replay.hpp"
#include "policies/eval/trace_steps.hpp"
#include "test_models.hpp"

namespace tierrt::policy {
namespace {

struct Checker {
  const StepTimeline& tl;
  std::uint64_t budget;
  std::vector<std::uint8_t> on_device;  // the device copy is valid
  std::vector<double> back_at;          // when the last fetch completed
  std::vector<std::uint8_t> was_off;    // released at least once before its current use
  double compute_free = 0;              // when the compute stream finished its last launch
  std::uint64_t max_device = 0;
  std::vector<std::string> errors;
  std::vector<std::uint32_t> stalled_on;  // blocks a launch had to wait for

  Checker(const StepTimeline& t, std::uint64_t b)
      : tl(t), budget(b), on_device(t.blocks.size(), 0), back_at(t.blocks.size(), -1), was_off(t.blocks.size(), 0) {
    for (std::uint32_t i = 0; i < t.blocks.size(); ++i)
      on_device[i] = t.blocks[i].predates_step() && t.blocks[i].free_op != 0;
  }

  void operator()(const SimAudit& a) {
    max_device = std::max(max_device, a.device_bytes);
    switch (a.kind) {
      case SimAudit::Kind::OpStart:
        for (std::uint32_t b = 0; b < tl.blocks.size(); ++b)
          if (tl.blocks[b].alloc_op == a.block && !tl.blocks[b].predates_step()) on_device[b] = 1;
        for (std::uint32_t b : tl.blocks_of(a.block)) {
          if (!on_device[b]) errors.push_back("launch " + std::to_string(a.block) + " ran without block " + std::to_string(b));
          if (was_off[b] && back_at[b] > compute_free + 1e-6) stalled_on.push_back(b);
          was_off[b] = 0;
        }
        break;
      case SimAudit::Kind::OpEnd:
        compute_free = a.time_ns;
        break;
      case SimAudit::Kind::Released:
        on_device[a.block] = 0;
        was_off[a.block] = 1;
        break;
      case SimAudit::Kind::FetchDone:
        on_device[a.block] = 1;
        back_at[a.block] = a.time_ns;
        break;
      case SimAudit::Kind::Freed:
        on_device[a.block] = 0;
        break;
      case SimAudit::Kind::SpillStart:
      case SimAudit::Kind::FetchStart:
        break;
    }
  }
};

// The smallest budget at which the safe reactive fallback can always make room:
// what predates the step plus what one launch touches and allocates.
std::uint64_t reactive_floor(const StepTimeline& tl) {
  std::uint64_t persistent = 0, floor = 0;
  for (const auto& b : tl.blocks)
    if (b.predates_step()) persistent += b.bytes;
  for (std::uint32_t op = 0; op < tl.ops.size(); ++op) {
    std::uint64_t need = 0;
    for (std::uint32_t b = 0; b < tl.blocks.size(); ++b) {
      const auto& r = tl.blocks[b];
      if (r.predates_step()) continue;
      auto used = tl.blocks_of(op);
      const bool touched = std::find(used.begin(), used.end(), b) != used.end();
      if (touched || r.alloc_op == op) need += r.bytes;
    }
    floor = std::max(floor, need);
  }
  return persistent + floor;
}

class RandomTraces : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(RandomTraces, ModelInvariantsHoldForEveryPolicy) {
  const std::uint64_t seed = GetParam();
  const auto a = analyse_trace(test::random_trace(seed));
  ASSERT_EQ(a.steps.size(), 3u);
  const auto& last = a.steps.back();
  const auto profile = last.resident_profile();
  const std::uint64_t peak = *std::max_element(profile.begin(), profile.end());
  const std::uint64_t floor = std::min(peak, reactive_floor(last));
  std::mt19937_64 rng(seed * 7919);
  const std::uint64_t budget = floor + std::uniform_int_distribution<std::uint64_t>(0, peak - floor)(rng);
  const double h2d = std::uniform_real_distribution<double>(1, 400)(rng);
  const double d2h = std::uniform_real_distribution<double>(1, 400)(rng);
  const LinkModel link{"random", h2d * 1e9, d2h * 1e9};
  const LowerBound bound = lower_bound(last, budget, link);

  for (const auto& name : policy_names()) {
    auto policy = make_policy(name);
    const std::uint64_t b = policy->respects_budget() ? budget : std::numeric_limits<std::uint64_t>::max();
    for (std::size_t s = 0; s < a.steps.size(); ++s) {
      const auto& tl = a.steps[s];
      StepContext ctx{b, link, &tl};
      const auto plans = policy->plan_step(ctx);
      Checker check(tl, b);
      SimResult r = simulate_step(tl, plans, *policy, SimOptions{b, link, false, std::ref(check)});
      policy->observe(tl, r);
      SCOPED_TRACE(name + " step " + std::to_string(s) + " budget " + std::to_string(b));
      for (const auto& e : check.errors) ADD_FAILURE() << e;
      EXPECT_EQ(check.max_device, r.peak_bytes);
      EXPECT_LE(check.max_device, b == std::numeric_limits<std::uint64_t>::max() ? check.max_device : b + r.over_budget_bytes);
      EXPECT_EQ(r.over_budget_bytes, 0u) << "the budget is above the reactive floor";
      for (std::uint32_t blk : check.stalled_on) EXPECT_GT(r.late_ns[blk], 0) << "uncounted stall on block " << blk;
      EXPECT_GE(r.step_ns + 1e-3, r.compute_ns);
      EXPECT_NEAR(r.stall_ns, r.step_ns - r.compute_ns, 1e-3);
      if (s + 1 == a.steps.size() && bound.feasible && policy->respects_budget()) {
        EXPECT_GE(r.step_ns + 1e-3, bound.step_ns()) << "beat the lower bound";
      }
      if (!policy->respects_budget()) {
        EXPECT_EQ(r.bytes_d2h + r.bytes_h2d, 0u);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomTraces, ::testing::Range<std::uint64_t>(1, 401));

// Four 100 MB granule-group members allocated at once (lazy), each named by
// one launch of 10 ms, under a budget of 200 MB: members the device has no
// room for start on the host, as the runtime places them, rather than pass
// the budget. The same blocks allocated eagerly cannot fit.
SimResult four_members(bool lazy, bool before_the_step = false) {
  constexpr std::uint64_t kMB = 1'000'000;
  Trace t;
  auto allocs = [&] {
    for (BlockId b = 1; b <= 4; ++b) t.push_back(Event::alloc(b, 100 * kMB, 0, lazy));
  };
  if (before_the_step) allocs();  // a pool taken once, before the steps that use it
  t.push_back(Event::step(0));
  if (!before_the_step) allocs();
  for (LaunchSeq i = 0; i < 4; ++i) t.push_back(Event::launch(i, 10'000'000)), t.push_back(Event::use(i + 1, i));
  if (!before_the_step)
    for (BlockId b = 1; b <= 4; ++b) t.push_back(Event::free(b));
  const StepTimeline tl = analyse_trace(t).steps.at(0);
  const LinkModel link{"1GB/s", 1e9, 1e9};
  auto lru = make_policy("lru");
  const auto plans = lru->plan_step(StepContext{200 * kMB, link, &tl});
  return simulate_step(tl, plans, *lru, SimOptions{200 * kMB, link, false, {}});
}

TEST(LazyBlocks, StartOnTheHostWhereTheDeviceHasNoRoom) {
  const SimResult lazy = four_members(true);
  EXPECT_EQ(lazy.over_budget_bytes, 0u);
  EXPECT_LE(lazy.peak_bytes, 200'000'000u);
  // Members 3 and 4 start on the host (nothing copied out to place them),
  // come in when named, and each pushes out one member used before.
  EXPECT_EQ(lazy.bytes_h2d, 200'000'000u);
  EXPECT_EQ(lazy.bytes_d2h, 200'000'000u);
  const SimResult eager = four_members(false);
  EXPECT_GT(eager.over_budget_bytes, 0u) << "allocated at once, 400 MB cannot fit 200 MB";
}

// The same members allocated before the step (a pool taken once): the step
// starts with those it uses first on the device, as far as the budget goes.
TEST(LazyBlocks, FromBeforeTheStepStartWhereTheBudgetLeavesThem) {
  const SimResult lazy = four_members(true, /*before_the_step=*/true);
  EXPECT_EQ(lazy.over_budget_bytes, 0u);
  EXPECT_LE(lazy.peak_bytes, 200'000'000u);
  EXPECT_EQ(lazy.bytes_h2d, 200'000'000u) << "members 3 and 4 come in when named";
  const SimResult eager = four_members(false, /*before_the_step=*/true);
  EXPECT_GT(eager.over_budget_bytes, 0u) << "blocks from before the step are taken as resident";
}

}  // namespace
}  // namespace tierrt::policy
