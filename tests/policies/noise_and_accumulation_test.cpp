// Steps that repeat only up to noise (extra temporaries, reordered independent
// launches, jittered timings, drawn afresh in every step) and steps made of K
// micro-steps: the step is still found without markers, the plan stays in force
// through the noise, and a trace whose step does not repeat says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "policies/eval/policy_comparison.hpp"
#include "policies/eval/trace_steps.hpp"
#include "policies/eval/transformer_synth.hpp"
#include "policies/step_alignment.hpp"
#include "test_models.hpp"

namespace tierrt::policy {
namespace {

using test::NoiseCase;

SynthOptions noisy(const NoiseCase& c, std::uint64_t seed) { return test::noisy(c, seed, 4); }

class Noise : public ::testing::TestWithParam<std::tuple<NoiseCase, std::uint64_t>> {};

TEST_P(Noise, NoiseDiffersFromStepToStep) {
  const auto& [c, seed] = GetParam();
  auto o = noisy(c, seed);
  o.step_markers = true;
  const auto a = analyse_trace(synthesize(o));
  ASSERT_EQ(a.steps.size(), 4u);
  // Temporaries and reordering change the token sequence; jitter the durations.
  bool differs = false;
  for (std::size_t s = 1; s < a.steps.size(); ++s) {
    differs |= a.steps[s].tokens != a.steps[0].tokens;
    for (std::size_t i = 0; i < a.steps[s].ops.size() && i < a.steps[0].ops.size(); ++i)
      differs |= a.steps[s].ops[i].duration_ns != a.steps[0].ops[i].duration_ns;
  }
  EXPECT_TRUE(differs);
}

TEST_P(Noise, StepFoundWithoutMarkersIsTheMarkedOne) {
  const auto& [c, seed] = GetParam();
  auto o = noisy(c, seed);
  const auto plain = analyse_trace(synthesize(o));
  o.step_markers = true;
  const auto marked = analyse_trace(synthesize(o));
  ASSERT_EQ(plain.no_step, "");
  ASSERT_EQ(plain.steps.size(), marked.steps.size());
  for (std::size_t s = 0; s < plain.steps.size(); ++s) {
    EXPECT_EQ(plain.steps[s].ops.size(), marked.steps[s].ops.size()) << "step " << s;
    EXPECT_EQ(plain.steps[s].compute_ns(), marked.steps[s].compute_ns()) << "step " << s;
  }
}

TEST_P(Noise, PlanStaysInForce) {
  const auto& [c, seed] = GetParam();
  const auto a = analyse_trace(synthesize(noisy(c, seed)));
  ASSERT_EQ(a.no_step, "");
  BudgetChoice b;
  b.offload_fraction = 0.5;
  const auto cmp = compare_policies(a.steps, {"none", "tierrt"}, parse_link("pcie5"), b, false);
  const auto& t = cmp.policies.back();
  ASSERT_EQ(t.name, "tierrt");
  ASSERT_TRUE(cmp.bound.feasible);
  // Followed through the whole step, every planned prefetch in time, and the
  // step within 5% of what no schedule of copies can beat.
  EXPECT_EQ(t.steady.plan_ops, a.steps.back().ops.size());
  EXPECT_EQ(t.steady.demand_fetches, 0u);
  EXPECT_GE(t.steady.prefetch_hit_rate(), 0.9);
  EXPECT_EQ(t.steady.over_budget_bytes, 0u);
  EXPECT_LE(t.steady.step_ns, 1.05 * cmp.bound.step_ns());
}

INSTANTIATE_TEST_SUITE_P(
    Options, Noise,
    ::testing::Combine(::testing::Values(NoiseCase{"temporaries", 2, 0, 0}, NoiseCase{"reorder", 0, 0.5, 0},
                                         NoiseCase{"jitter", 0, 0, 0.2}, NoiseCase{"all", 2, 0.5, 0.2}),
                       ::testing::Values(1u, 2u, 3u)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_seed" + std::to_string(std::get<1>(info.param));
    });

// Extras match nothing and change nothing; swapped launches match where they
// came from; a block's free matches only the free of the block it stands for.
TEST(StepAlignment, ExtrasAndSwapsKeepTheLearnedTokensMatched) {
  // Learned: alloc A, launch, alloc B, launch, free A, free B.
  const std::vector<std::uint64_t> learned = {11, 20, 12, 21, 31, 32};
  const std::vector<std::uint32_t> ordinals = {0, kLaunchToken, 1, kLaunchToken, 0 | kFreeToken, 1 | kFreeToken};
  StepAligner al(learned, ordinals);
  // Running: the two launches swapped with their allocations, an extra in between.
  EXPECT_EQ(al.feed(12, 0), 2u);
  EXPECT_EQ(al.feed(21, kLaunchToken), 3u);
  EXPECT_EQ(al.feed(99, 1), kNoMatch);  // an extra allocation
  EXPECT_EQ(al.feed(11, 2), 0u);
  EXPECT_EQ(al.feed(20, kLaunchToken), 1u);
  EXPECT_EQ(al.feed(98, 1 | kFreeToken), kNoMatch);  // the extra's free
  EXPECT_EQ(al.learned_ordinal(0), 1u);
  EXPECT_EQ(al.learned_ordinal(2), 0u);
  EXPECT_EQ(al.learned_ordinal(1), kNoOrdinal);
  EXPECT_EQ(al.feed(31, 2 | kFreeToken), 4u);  // the block standing for A, by its role
  EXPECT_EQ(al.feed(32, 0 | kFreeToken), 5u);
  EXPECT_FALSE(al.lost());
}

TEST(StepAlignment, BlocksFreedWhereTheLearnedStepKeptThemLoseIt) {
  // An eval step: blocks allocated as in training are freed at once.
  std::vector<std::uint64_t> learned;
  std::vector<std::uint32_t> ordinals;
  for (std::uint32_t b = 0; b < 8; ++b) learned.push_back(100 + b), ordinals.push_back(b);
  for (std::uint32_t b = 0; b < 8; ++b) learned.push_back(200), ordinals.push_back(kLaunchToken);
  for (std::uint32_t b = 0; b < 8; ++b) learned.push_back(300 + b), ordinals.push_back(b | kFreeToken);
  AlignOptions o;
  o.look_ahead = 4;
  StepAligner al(learned, ordinals, o);
  for (std::uint32_t b = 0; b < 8 && !al.lost(); ++b) {
    EXPECT_NE(al.feed(100 + b, b), kNoMatch);
    al.feed(300 + b, b | kFreeToken);
  }
  EXPECT_TRUE(al.lost());
}

class Accumulation : public ::testing::TestWithParam<std::uint32_t> {};

// The optimizer step holds all K micro-steps: found without markers, it is the
// step markers would have made.
TEST_P(Accumulation, StepHoldsEveryMicroStep) {
  auto o = test::tiny_options(test::tiny_dense(), 3);
  o.shape.grad_accum = GetParam();
  const auto plain = analyse_trace(synthesize(o));
  o.step_markers = true;
  const auto marked = analyse_trace(synthesize(o));
  ASSERT_EQ(plain.no_step, "");
  ASSERT_EQ(plain.steps.size(), 3u);
  ASSERT_EQ(marked.steps.size(), 3u);
  o.shape.grad_accum = 1;
  o.step_markers = true;
  const auto single = analyse_trace(synthesize(o));
  for (std::size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(plain.steps[s].ops.size(), marked.steps[s].ops.size()) << "step " << s;
    EXPECT_EQ(plain.steps[s].tokens, marked.steps[s].tokens) << "step " << s;
    // K forward and backward passes: more than K - 1 single steps' launches.
    EXPECT_GT(plain.steps[s].ops.size(), (GetParam() - 1) * single.steps[0].ops.size());
  }
}

INSTANTIATE_TEST_SUITE_P(K, Accumulation, ::testing::Values(1u, 2u, 4u, 8u));

TEST(NoStep, ATraceWhoseStepDoesNotRepeatSaysSo) {
  const auto one = analyse_trace(synthesize(test::tiny_options(test::tiny_dense(), 1)));
  EXPECT_NE(one.no_step, "");
  const Trace flat = {Event::alloc(1, 100), Event::launch(0, 10), Event::use(1, 0), Event::free(1)};
  EXPECT_NE(analyse_trace(flat).no_step, "");
  // With markers, the framework said where steps are: believed as given.
  auto marked = test::tiny_options(test::tiny_dense(), 1);
  marked.step_markers = true;
  EXPECT_EQ(analyse_trace(synthesize(marked)).no_step, "");
}

}  // namespace
}  // namespace tierrt::policy
