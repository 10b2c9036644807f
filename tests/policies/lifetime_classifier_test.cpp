// The classifier against the synthesizer's ground truth: at least 99% of bytes
// classed right, with and without noise, for a dense and an MoE model.
#include <gtest/gtest.h>

#include <map>

#include "policies/eval/expected_class.hpp"
#include "policies/eval/trace_steps.hpp"
#include "policies/eval/transformer_synth.hpp"
#include "test_models.hpp"

namespace tierrt::policy {
namespace {

struct Score {
  double right = 0, total = 0;
  std::map<LifetimeClass, double> wrong;  // by expected class
  double fraction() const { return total == 0 ? 0 : right / total; }
};

Score score(const StepTimeline& tl) {
  Score s;
  for (const auto& b : tl.blocks) {
    const auto bytes = static_cast<double>(b.bytes);
    s.total += bytes;
    const LifetimeClass want = expected_class(b.role);
    if (b.cls == want) s.right += bytes;
    else s.wrong[want] += bytes;
  }
  return s;
}

// Activations are the class the planner acts on: score them on their own too, so
// that persistent bytes (most of the total) cannot hide a bad activation score.
double activation_recall(const StepTimeline& tl) {
  double right = 0, total = 0;
  for (const auto& b : tl.blocks) {
    if (expected_class(b.role) != LifetimeClass::Activation) continue;
    total += static_cast<double>(b.bytes);
    if (b.cls == LifetimeClass::Activation) right += static_cast<double>(b.bytes);
  }
  return total == 0 ? 1 : right / total;
}

void expect_good(const SynthOptions& o) {
  const auto a = analyse_trace(synthesize(o));
  ASSERT_GE(a.steps.size(), 2u);
  for (const auto& tl : a.steps) {
    const Score s = score(tl);
    EXPECT_GE(s.fraction(), 0.99) << "bytes right " << s.fraction();
    EXPECT_GE(activation_recall(tl), 0.99);
    bool workspace_found = false;
    for (const auto& b : tl.blocks) workspace_found |= b.role == Role::Workspace && b.cls == LifetimeClass::Workspace;
    EXPECT_TRUE(workspace_found);
  }
}

TEST(LifetimeClassifier, DenseWithoutNoise) { expect_good(test::tiny_options(test::tiny_dense())); }

TEST(LifetimeClassifier, MoeWithoutNoise) { expect_good(test::tiny_options(test::tiny_moe())); }

class Noisy : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(Noisy, DenseWithExtraTransientsAndReorderedOps) {
  auto o = test::tiny_options(test::tiny_dense());
  o.noise_transients = 3;
  o.reorder_probability = 0.5;
  o.duration_jitter = 0.3;
  o.step_markers = true;  // the noise makes every step's token sequence different
  o.seed = GetParam();
  expect_good(o);
}

TEST_P(Noisy, MoeWithExtraTransientsAndReorderedOps) {
  auto o = test::tiny_options(test::tiny_moe());
  o.noise_transients = 3;
  o.reorder_probability = 0.5;
  o.duration_jitter = 0.3;
  o.step_markers = true;
  o.seed = GetParam();
  expect_good(o);
}

INSTANTIATE_TEST_SUITE_P(Seeds, Noisy, ::testing::Values(1u, 2u, 3u, 4u));

TEST(LifetimeClassifier, PhaseMarkerSetsTheTurn) {
  auto o = test::tiny_options(test::tiny_dense());
  o.phase_markers = true;
  o.step_markers = true;
  const auto a = analyse_trace(synthesize(o));
  ASSERT_FALSE(a.steps.empty());
  ASSERT_EQ(a.steps[0].backward_begins.size(), 1u);
  EXPECT_EQ(turn_ops(a.steps[0]), a.steps[0].backward_begins);
  EXPECT_GE(score(a.steps[0]).fraction(), 0.99);
}

TEST(LifetimeClassifier, HandBuiltStep) {
  // weight (persistent), an activation used at 0 and 3, a transient, a workspace-like block.
  Trace t{Event::alloc(1, 1000), Event::step(0), Event::alloc(2, 500), Event::alloc(3, 50)};
  for (LaunchSeq i = 0; i < 40; ++i) {
    t.push_back(Event::launch(i, 100));
    t.push_back(Event::use(3, i));
    if (i == 0 || i == 30) t.push_back(Event::use(2, i));
    if (i == 0 || i == 35) t.push_back(Event::use(1, i));
    if (i == 5) t.push_back(Event::alloc(4, 400));
    if (i == 6) t.push_back(Event::use(4, i)), t.push_back(Event::free(4));
    if (i == 20) t.push_back(Event::alloc(5, 800));  // the backward pass's big temporary sets the turn
    if (i == 21) t.push_back(Event::use(5, i)), t.push_back(Event::free(5));
  }
  t.push_back(Event::free(2));
  const auto a = analyse_trace(t);
  ASSERT_EQ(a.steps.size(), 1u);
  const auto& tl = a.steps[0];
  auto cls = [&](BlockId id) {
    for (const auto& b : tl.blocks)
      if (b.id == id) return b.cls;
    return LifetimeClass::Transient;
  };
  EXPECT_EQ(cls(1), LifetimeClass::Persistent);
  EXPECT_EQ(cls(2), LifetimeClass::Activation);
  EXPECT_EQ(cls(3), LifetimeClass::Workspace);
  EXPECT_EQ(cls(4), LifetimeClass::Transient);
  EXPECT_EQ(cls(5), LifetimeClass::Transient);
}

}  // namespace
}  // namespace tierrt::policy

namespace tierrt::policy {
namespace {

// Gradient accumulation: several forward/backward turns in one step; the saved
// tensors of every micro-batch are activations.
class GradAccum : public ::testing::TestWithParam<bool> {};

TEST_P(GradAccum, EveryMicroBatchTurnIsFound) {
  auto o = test::tiny_options(test::tiny_dense());
  o.shape.grad_accum = 3;
  o.phase_markers = GetParam();
  const auto a = analyse_trace(synthesize(o));
  ASSERT_GE(a.steps.size(), 2u);
  for (const auto& tl : a.steps) {
    EXPECT_EQ(turn_ops(tl).size(), 3u);
    EXPECT_GE(score(tl).fraction(), 0.99);
    EXPECT_GE(activation_recall(tl), 0.99);
  }
}

INSTANTIATE_TEST_SUITE_P(Markers, GradAccum, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "phase_markers" : "no_markers"; });

}  // namespace
}  // namespace tierrt::policy
