// The baselines tierrt-replay compares against, each checked for the behaviour its
// framework has: vDNN covers every saved tensor, save_on_cpu serialises its copies
// with compute, checkpointing pays each layer's forward again, JAX recomputes what
// it neither keeps nor offloads, and --offload-all says what it moved.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <set>

#include "policies/eval/baseline_policies.hpp"
#include "policies/eval/policy_comparison.hpp"
#include "policies/eval/recompute_policies.hpp"
#include "policies/eval/replay.hpp"
#include "policies/eval/trace_steps.hpp"
#include "policies/eval/transformer_synth.hpp"
#include "test_models.hpp"

namespace tierrt::policy {
namespace {

constexpr std::uint64_t kUnbounded = std::numeric_limits<std::uint64_t>::max();

const std::vector<StepTimeline>& dense_steps() {
  static const auto a = analyse_trace(synthesize(test::tiny_options(test::tiny_dense())));
  return a.steps;
}

std::uint64_t activation_bytes(const StepTimeline& tl) {
  std::uint64_t n = 0;
  for (const auto& b : tl.blocks) n += b.cls == LifetimeClass::Activation ? b.bytes : 0;
  return n;
}

// The first use of the first block of `role` (the launch that wrote it), or kNever.
std::uint32_t first_writer(const StepTimeline& tl, Role role) {
  std::uint32_t op = kNever;
  for (std::uint32_t b = 0; b < tl.blocks.size(); ++b)
    if (tl.blocks[b].role == role && tl.uses_of(b).size() > 0) op = std::min(op, tl.uses_of(b).front());
  return op;
}

TEST(Vdnn, PlansEverySavedTensorNotOnlyTheResidualStream) {
  const StepTimeline& tl = dense_steps().back();
  VdnnPolicy p;
  const auto plans = p.plan_step(StepContext{kUnbounded, parse_link("pcie5"), &tl});
  ASSERT_EQ(plans.size(), 1u);
  std::set<std::uint32_t> spilled;
  for (const Trigger& t : plans[0].triggers.all())
    if (t.action == Action::Spill) spilled.insert(t.ordinal);
  std::uint64_t covered = 0;
  for (std::uint32_t ord : spilled) {
    const BlockRecord& r = tl.blocks[tl.by_ordinal[ord]];
    if (r.cls == LifetimeClass::Activation) covered += r.bytes;
  }
  // Layer inputs alone were about a tenth of the activation bytes.
  EXPECT_GE(static_cast<double>(covered), 0.95 * static_cast<double>(activation_bytes(tl)));
}

TEST(SaveOnCpu, CopiesAddToTheStepAndComeBackOnDemand) {
  const auto& steps = dense_steps();
  const LinkModel link = parse_link("pcie5");
  SaveOnCpuPolicy p;
  const ReplayRun run = replay(steps, p, ReplayOptions{kUnbounded, link, false});
  const SimResult& r = run.steps.back();
  const double compute = static_cast<double>(steps.back().compute_ns());
  const double out = link.d2h_ns(static_cast<double>(r.bytes_d2h));
  const double back = link.h2d_ns(static_cast<double>(r.bytes_h2d));
  EXPECT_GE(static_cast<double>(r.spilled_activation_bytes), 0.95 * static_cast<double>(activation_bytes(steps.back())));
  // The pack copy runs on the compute stream: its whole time is in the step (each
  // copy launch's time is whole nanoseconds: up to 1 ns short per copy).
  const double rounding = static_cast<double>(steps.back().blocks.size());
  EXPECT_NEAR(run.stream_copy_ns, out, rounding);
  EXPECT_GE(r.step_ns, compute + out - rounding);
  // Unpack fetches when backward reads, nothing prefetched: the fetches wait too.
  EXPECT_EQ(r.prefetch_hits + r.late_prefetches, 0u);
  EXPECT_GT(r.demand_fetches, 0u);
  EXPECT_GE(r.step_ns, compute + out + back - rounding);
}

TEST(Checkpoint, PaysEachLayersForwardAgainAndMovesNothing) {
  const auto& steps = dense_steps();
  const StepTimeline& tl = steps.back();
  CheckpointPolicy p;
  const ReplayRun run = replay(steps, p, ReplayOptions{kUnbounded, parse_link("pcie5"), false});
  const SimResult& r = run.steps.back();
  // The decoder layers' forward: from layer 0's first norm to the launch before the head.
  double forward = 0;
  for (std::uint32_t op = first_writer(tl, Role::NormOutput); op < first_writer(tl, Role::Logits); ++op)
    forward += static_cast<double>(tl.ops[op].duration_ns);
  EXPECT_DOUBLE_EQ(run.recompute_ns, forward);
  EXPECT_DOUBLE_EQ(r.step_ns, static_cast<double>(tl.compute_ns()) + forward);
  EXPECT_EQ(r.bytes_d2h + r.bytes_h2d, 0u);
  // Only the layer inputs stay: most of the activation bytes are recomputed, and the
  // peak falls accordingly.
  EXPECT_GE(static_cast<double>(run.recomputed_activation_bytes), 0.8 * static_cast<double>(activation_bytes(tl)));
  const auto profile = tl.resident_profile();
  EXPECT_LT(r.peak_bytes, *std::max_element(profile.begin(), profile.end()));
}

TEST(Jax, RecomputesWhatItNeitherKeepsNorOffloads) {
  const auto& steps = dense_steps();
  const StepTimeline& tl = steps.back();
  const LinkModel link = parse_link("pcie5");
  JaxRematOffloadPolicy jax;
  const auto ex = jax.executed_step(tl, link);
  ASSERT_TRUE(ex.has_value());
  std::set<Role> recomputed;
  for (std::uint32_t b : ex->recomputed) recomputed.insert(tl.blocks[b].role);
  for (Role offloaded : {Role::Query, Role::Key, Role::Value, Role::AttentionOutput, Role::MlpUp, Role::MlpGate})
    EXPECT_EQ(recomputed.count(offloaded), 0u) << static_cast<int>(offloaded);
  for (Role remade : {Role::NormOutput, Role::NormStats, Role::SoftmaxStats, Role::MlpActivation, Role::MlpProduct})
    EXPECT_EQ(recomputed.count(remade), 1u) << static_cast<int>(remade);
  // The softmax statistics need the attention kernel again: at least every layer's
  // attention time, at most the whole forward (what checkpointing pays).
  double attention = 0;
  for (std::uint32_t b = 0; b < tl.blocks.size(); ++b)
    if (tl.blocks[b].role == Role::SoftmaxStats) attention += static_cast<double>(tl.ops[tl.uses_of(b).front()].duration_ns);
  const auto ckpt = CheckpointPolicy().executed_step(tl, link);
  ASSERT_TRUE(ckpt.has_value());
  EXPECT_GE(ex->recompute_ns, attention);
  EXPECT_LT(ex->recompute_ns, ckpt->recompute_ns);
  EXPECT_DOUBLE_EQ(static_cast<double>(ex->timeline.compute_ns()), static_cast<double>(tl.compute_ns()) + ex->recompute_ns);

  const ReplayRun run = replay(steps, jax, ReplayOptions{kUnbounded, link, false});
  EXPECT_GE(run.steps.back().step_ns + 1, static_cast<double>(tl.compute_ns()) + run.recompute_ns);
  EXPECT_GT(run.steps.back().bytes_d2h, 0u);
  EXPECT_GT(run.recomputed_activation_bytes, 0u);
}

// Every use of the executed step falls within its block's life, and a recomputed
// tensor's second life begins at the launch that remakes it.
TEST(ExecutedStep, RecomputedStepIsConsistent) {
  const StepTimeline& tl = dense_steps().back();
  const auto ex = CheckpointPolicy().executed_step(tl, parse_link("pcie5"));
  ASSERT_TRUE(ex.has_value());
  const StepTimeline& e = ex->timeline;
  EXPECT_EQ(e.blocks.size(), tl.blocks.size() + ex->recomputed.size());
  for (std::uint32_t b = 0; b < e.blocks.size(); ++b) {
    const BlockRecord& r = e.blocks[b];
    const auto uses = e.uses_of(b);
    EXPECT_TRUE(std::is_sorted(uses.begin(), uses.end()));
    for (std::uint32_t u : uses) {
      EXPECT_GE(u, r.alloc_op) << b;
      if (r.free_op != kNever) {
        EXPECT_LT(u, r.free_op) << b;
      }
    }
    if (!r.predates_step()) {
      EXPECT_EQ(e.by_ordinal[r.ordinal], b);
    }
  }
  for (std::size_t i = tl.blocks.size(); i < e.blocks.size(); ++i) {
    ASSERT_FALSE(e.uses_of(static_cast<std::uint32_t>(i)).empty());
    EXPECT_EQ(e.uses_of(static_cast<std::uint32_t>(i)).front(), e.blocks[i].alloc_op);
  }
}

TEST(OffloadAll, ReportsTheShareTierrtActuallyMoved) {
  BudgetChoice b;
  b.offload_all = true;
  const auto c = compare_policies(dense_steps(), {"none", "tierrt"}, parse_link("pcie5"), b, false);
  ASSERT_TRUE(c.offload_all_activation_off.has_value());
  const auto it = std::find_if(c.policies.begin(), c.policies.end(), [](auto& p) { return p.name == "tierrt"; });
  ASSERT_NE(it, c.policies.end());
  EXPECT_DOUBLE_EQ(*c.offload_all_activation_off, it->activation_off);
}

TEST(PolicyNames, EveryBaselineIsSelectable) {
  const auto names = policy_names();
  for (const char* n : {"save_on_cpu", "checkpoint", "jax", "vdnn"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
    EXPECT_EQ(make_policy(n)->name(), n);
  }
}

}  // namespace
}  // namespace tierrt::policy
