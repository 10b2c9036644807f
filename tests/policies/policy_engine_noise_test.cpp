// The runtime's consumer of plans (PolicyEngine) through steps that repeat only
// up to noise: extra temporaries, reordered independent launches and jittered
// timings, drawn afresh in every step. Events go in one at a time, as the
// policy thread feeds them; the plan must stay in force and its triggers must
// name the running step's blocks. An eval step in between drops it.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "policies/eval/trace_steps.hpp"
#include "policies/eval/transformer_synth.hpp"
#include "policies/planner.hpp"
#include "policies/policy_engine.hpp"
#include "test_models.hpp"

namespace tierrt::policy {
namespace {

using test::NoiseCase;

SynthOptions noisy_marked(const NoiseCase& c, std::uint64_t seed, std::uint32_t steps) {
  auto o = test::noisy(c, seed, steps);
  o.step_markers = true;  // the driver needs them to tell steps apart; the engine may not see them
  return o;
}

// What the engine handed out in one (marked) step, as the policy thread asks:
// triggers_ahead(0) and (1) before each launch is recorded.
struct StepLog {
  std::set<BlockId> allocated;              // blocks allocated in this step
  std::set<BlockId> prefetched, spilled;    // blocks the engine named
  std::set<std::uint64_t> prefetched_bytes;
  bool foreign_block = false;               // a trigger named no block of this step
  bool followed_at_end = false;
};

std::vector<StepLog> drive(PolicyEngine& engine, const Trace& trace, bool with_markers) {
  std::vector<StepLog> logs;
  std::unordered_map<BlockId, std::uint64_t> bytes;
  auto note = [&](std::span<const Trigger> triggers, bool spills) {
    for (const Trigger& t : triggers) {
      if (t.action == Action::Spill && !spills) continue;
      const auto b = engine.block_of(t.ordinal);
      if (!b || !logs.back().allocated.count(*b)) {
        logs.back().foreign_block = true;
        continue;
      }
      if (t.action == Action::Prefetch) logs.back().prefetched.insert(*b), logs.back().prefetched_bytes.insert(bytes[*b]);
      if (t.action == Action::Spill) logs.back().spilled.insert(*b);
    }
  };
  for (const Event& e : trace) {
    if (e.kind == EventKind::Step) {
      if (!logs.empty()) logs.back().followed_at_end = engine.following_plan();
      logs.emplace_back();
      if (!with_markers) continue;
    }
    if (e.kind == EventKind::Launch && !logs.empty()) {
      note(engine.triggers_ahead(0), true);
      note(engine.triggers_ahead(1), false);
    }
    engine.record(e);
    if (e.kind == EventKind::Alloc && !logs.empty()) logs.back().allocated.insert(e.a), bytes[e.a] = e.b;
  }
  logs.back().followed_at_end = engine.following_plan();
  return logs;
}

std::uint64_t budget_of(const TraceSteps& a) {
  const auto profile = a.steps[0].resident_profile();
  return *std::max_element(profile.begin(), profile.end()) * 8 / 10;
}

// Distinct blocks (and their sizes) the plan made from `learned` prefetches.
std::pair<std::size_t, std::set<std::uint64_t>> planned_prefetches(const StepTimeline& learned, std::uint64_t budget) {
  const auto plan = plan_step(learned, budget, parse_link("pcie5"), {}).plan;
  std::set<std::uint32_t> ordinals;
  std::set<std::uint64_t> sizes;
  for (const Trigger& t : plan.triggers.all())
    if (t.action == Action::Prefetch && ordinals.insert(t.ordinal).second)
      sizes.insert(learned.blocks[learned.by_ordinal[t.ordinal]].bytes);
  return {ordinals.size(), sizes};
}

class NoisyRun : public ::testing::TestWithParam<std::tuple<NoiseCase, std::uint64_t>> {};

TEST_P(NoisyRun, PlanStaysInForceAndNamesTheRunningBlocks) {
  const auto& [c, seed] = GetParam();
  const Trace trace = synthesize(noisy_marked(c, seed, 6));
  const auto a = analyse_trace(trace);
  ASSERT_EQ(a.steps.size(), 6u);
  const std::uint64_t budget = budget_of(a);
  PolicyEngine engine({budget, parse_link("pcie5"), {}});
  const auto logs = drive(engine, trace, true);
  ASSERT_EQ(logs.size(), 6u);
  for (std::size_t s = 3; s < logs.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    // Each noisy step is a shape of its own: the plan followed is the last step's.
    const auto [planned, sizes] = planned_prefetches(a.steps[s - 1], budget);
    ASSERT_GT(planned, 0u);
    EXPECT_TRUE(logs[s].followed_at_end);
    EXPECT_FALSE(logs[s].foreign_block);
    EXPECT_GE(10 * logs[s].prefetched.size(), 9 * planned) << logs[s].prefetched.size() << " of " << planned;
    EXPECT_FALSE(logs[s].spilled.empty());
    // A prefetch names the running block that stands for a planned one: its size.
    for (std::uint64_t b : logs[s].prefetched_bytes) EXPECT_TRUE(sizes.count(b)) << b << " bytes";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Options, NoisyRun,
    ::testing::Combine(::testing::Values(NoiseCase{"temporaries", 2, 0, 0}, NoiseCase{"reorder", 0, 0.5, 0},
                                         NoiseCase{"jitter", 0, 0, 0.2}, NoiseCase{"all", 2, 0.5, 0.2}),
                       ::testing::Values(1u, 2u, 3u)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_seed" + std::to_string(std::get<1>(info.param));
    });

class NoisyEval : public ::testing::TestWithParam<std::uint64_t> {};

// An eval step (forward only, nothing saved) between noisy training steps: its
// blocks are freed where the training step kept them, so the plan is dropped,
// and the training steps after it take it up again.
TEST_P(NoisyEval, EvalStepDropsThePlanAndTrainingResumesIt) {
  auto o = noisy_marked({"all", 2, 0.5, 0.2}, GetParam(), 6);
  o.eval_after = 3;
  const Trace trace = synthesize(o);
  const auto a = analyse_trace(trace);
  PolicyEngine engine({budget_of(a), parse_link("pcie5"), {}});
  const auto logs = drive(engine, trace, true);
  ASSERT_EQ(logs.size(), 7u);  // 3 training, eval, 3 training
  EXPECT_TRUE(logs[2].followed_at_end);
  EXPECT_FALSE(logs[3].followed_at_end) << "followed the training plan through the eval step";
  EXPECT_LT(logs[3].prefetched.size(), logs[2].prefetched.size());
  for (std::size_t s : {5u, 6u}) {
    EXPECT_TRUE(logs[s].followed_at_end) << "step " << s;
    EXPECT_FALSE(logs[s].foreign_block) << "step " << s;
    EXPECT_FALSE(logs[s].prefetched.empty()) << "step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, NoisyEval, ::testing::Values(1u, 2u, 3u));

// Without markers the engine finds the noisy step itself (the detector with
// slack, as the model does) and then follows the plan by alignment.
TEST(NoisyRunWithoutMarkers, StepIsFoundAndThePlanFollowed) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Trace trace = synthesize(noisy_marked({"all", 2, 0.5, 0.2}, seed, 8));
    const auto a = analyse_trace(trace);
    PolicyEngine engine({budget_of(a), parse_link("pcie5"), {}});
    const auto logs = drive(engine, trace, false);
    ASSERT_EQ(logs.size(), 8u);
    EXPECT_GE(engine.steps_completed(), 5u);
    for (std::size_t s = 6; s < logs.size(); ++s) {
      EXPECT_FALSE(logs[s].foreign_block) << "step " << s;
      EXPECT_FALSE(logs[s].prefetched.empty()) << "step " << s;
    }
    EXPECT_TRUE(logs.back().followed_at_end);
  }
}

// Under gradient accumulation the step is the optimizer step with its K
// micro-steps, with markers or found without them; the plan covers all of it.
class AccumulatedRun : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(AccumulatedRun, PlanFollowedThroughEveryMicroStep) {
  for (bool markers : {true, false}) {
    SCOPED_TRACE(markers ? "markers" : "no markers");
    auto o = test::tiny_options(test::tiny_dense(), 6);
    o.shape.grad_accum = GetParam();
    o.step_markers = true;
    const Trace trace = synthesize(o);
    const auto a = analyse_trace(trace);
    PolicyEngine engine({budget_of(a), parse_link("pcie5"), {}});
    const auto logs = drive(engine, trace, markers);
    ASSERT_EQ(logs.size(), 6u);
    const auto [planned, sizes] = planned_prefetches(a.steps[4], budget_of(a));
    EXPECT_TRUE(logs.back().followed_at_end);
    EXPECT_FALSE(logs.back().foreign_block);
    EXPECT_GE(10 * logs.back().prefetched.size(), 9 * planned) << logs.back().prefetched.size() << " of " << planned;
  }
}

INSTANTIATE_TEST_SUITE_P(K, AccumulatedRun, ::testing::Values(2u, 4u));

}  // namespace
}  // namespace tierrt::policy
