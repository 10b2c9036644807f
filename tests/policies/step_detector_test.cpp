// Step detection: with markers, without them, with an eval step in between and
// with a shape change, on synthesized transformer steps.
#include <gtest/gtest.h>

#include <set>

#include "policies/eval/transformer_synth.hpp"
#include "policies/step_detector.hpp"
#include "policies/step_tokens.hpp"
#include "test_models.hpp"

namespace tierrt::policy {
namespace {

std::vector<const StepSpan*> steps_of(const StepDetection& d) {
  std::vector<const StepSpan*> out;
  for (const auto& s : d.spans)
    if (!s.prologue) out.push_back(&s);
  return out;
}

std::vector<std::size_t> marker_positions(const Trace& t) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < t.size(); ++i)
    if (t[i].kind == EventKind::Step) out.push_back(i);
  return out;
}

class StepDetection_ : public ::testing::TestWithParam<bool> {};  // dense or MoE

ModelConfig model_for(bool moe) { return moe ? test::tiny_moe() : test::tiny_dense(); }

TEST_P(StepDetection_, MarkersDefineTheSteps) {
  auto o = test::tiny_options(model_for(GetParam()), 4);
  o.step_markers = true;
  const Trace t = synthesize(o);
  const auto d = detect_steps(t);
  EXPECT_TRUE(d.used_markers);
  const auto marks = marker_positions(t);
  const auto s = steps_of(d);
  ASSERT_EQ(s.size(), 4u);
  for (std::size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i]->begin_event, marks[i]);
    EXPECT_EQ(s[i]->shape, s[0]->shape);
  }
}

TEST_P(StepDetection_, WithoutMarkersFindsTheSameStepsAsMarkersWould) {
  auto o = test::tiny_options(model_for(GetParam()), 4);
  const auto d = detect_steps(synthesize(o));
  o.step_markers = true;
  const Trace marked = synthesize(o);
  const auto dm = detect_steps(marked);
  EXPECT_FALSE(d.used_markers);
  EXPECT_GT(d.period_tokens, 0u);
  const auto s = steps_of(d), sm = steps_of(dm);
  ASSERT_EQ(s.size(), 4u);
  ASSERT_EQ(sm.size(), 4u);
  // Same token boundaries (the marked trace has one extra event per step, no token).
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(s[i]->begin_token, sm[i]->begin_token) << "step " << i;
    EXPECT_EQ(s[i]->end_token, sm[i]->end_token) << "step " << i;
    EXPECT_EQ(s[i]->signature, sm[i]->signature);
    EXPECT_EQ(s[i]->shape, d.dominant_shape);
  }
  // The period is a whole step, not a layer: it spans every launch of the step.
  EXPECT_EQ(d.period_tokens, s[0]->end_token - s[0]->begin_token);
}

void expect_eval_recognised(const StepDetection& d) {
  const auto s = steps_of(d);
  ASSERT_EQ(s.size(), 5u);  // 2 training, eval, 2 training
  EXPECT_NE(s[2]->shape, s[0]->shape) << "eval step taken for a training step";
  for (std::size_t i : {1u, 3u, 4u}) EXPECT_EQ(s[i]->shape, s[0]->shape) << "training step " << i;
  EXPECT_EQ(d.dominant_shape, s[0]->shape);
}

TEST_P(StepDetection_, EvalStepInBetweenIsDifferentWithoutMarkers) {
  auto o = test::tiny_options(model_for(GetParam()), 4);
  o.eval_after = 2;
  expect_eval_recognised(detect_steps(synthesize(o)));
}

TEST_P(StepDetection_, EvalStepInBetweenIsDifferentWithMarkers) {
  auto o = test::tiny_options(model_for(GetParam()), 4);
  o.eval_after = 2;
  o.step_markers = true;
  expect_eval_recognised(detect_steps(synthesize(o)));
}

void expect_shape_change(const StepDetection& d, bool markers) {
  const auto s = steps_of(d);
  // Without markers the step where the shape changes may split at a different point,
  // but the steps on either side must be told apart and each side be consistent.
  ASSERT_GE(s.size(), 5u);
  EXPECT_EQ(s[0]->shape, s[1]->shape);
  EXPECT_EQ(s[1]->shape, s[2]->shape);
  EXPECT_EQ(s[s.size() - 1]->shape, s[s.size() - 2]->shape);
  EXPECT_NE(s.front()->shape, s.back()->shape);
  if (markers) {
    EXPECT_EQ(s.size(), 6u);
  }
}

TEST_P(StepDetection_, ShapeChangeIsADifferentStepWithoutMarkers) {
  auto o = test::tiny_options(model_for(GetParam()), 6);
  o.change_after = 3;
  o.changed_seq = 512;
  expect_shape_change(detect_steps(synthesize(o)), false);
}

TEST_P(StepDetection_, ShapeChangeIsADifferentStepWithMarkers) {
  auto o = test::tiny_options(model_for(GetParam()), 6);
  o.change_after = 3;
  o.changed_seq = 512;
  o.step_markers = true;
  expect_shape_change(detect_steps(synthesize(o)), true);
}

INSTANTIATE_TEST_SUITE_P(Models, StepDetection_, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "moe" : "dense"; });

TEST(StepDetection, NoRepetitionIsOneStep) {
  const Trace t = {Event::alloc(1, 100), Event::launch(0, 10), Event::use(1, 0), Event::free(1)};
  const auto d = detect_steps(t);
  EXPECT_EQ(d.step_count(), 1u);
}

// A marker at the end of each step leaves the program's exit (frees, no
// launch) after the last one: no step, so no replay models it.
TEST(StepDetection, ASpanWithoutALaunchAfterTheLastMarkerIsNoStep) {
  auto o = test::tiny_options(test::tiny_dense(), 3);
  o.step_markers = true;
  Trace t = synthesize(o);
  t.push_back(Event::step(99));
  t.push_back(Event::alloc(12345, 4096));
  t.push_back(Event::free(12345));
  const auto d = detect_steps(t);
  ASSERT_EQ(steps_of(d).size(), 3u);
  EXPECT_EQ(steps_of(d).back()->end_event, t.size() - 3) << "the last step ends at the last marker";
}

TEST(CommonPrefix, StopsAtTheFirstDifference) {
  EXPECT_EQ(common_prefix({1, 2, 3}, {1, 2, 4, 3}), 2u);  // once off track, stays off
  EXPECT_EQ(common_prefix({1, 2, 3}, {1, 2}), 2u);
  EXPECT_EQ(common_prefix({1, 2, 3}, {1, 2, 3}), 3u);
  EXPECT_EQ(common_prefix({}, {1}), 0u);
}

TEST(Tokenizer, OnlineMatchesOffline) {
  const Trace t = synthesize(test::tiny_options(test::tiny_dense(), 2));
  std::vector<Token> online;
  Tokenizer tk;
  for (std::size_t i = 0; i < t.size(); ++i) tk.feed(t[i], static_cast<std::uint32_t>(i), online);
  tk.finish(online);
  const auto offline = tokenize(t);
  ASSERT_EQ(online.size(), offline.size());
  for (std::size_t i = 0; i < online.size(); ++i) {
    EXPECT_EQ(online[i].hash, offline[i].hash);
    EXPECT_EQ(online[i].live_before, offline[i].live_before);
    EXPECT_EQ(online[i].live_after, offline[i].live_after);
  }
}

}  // namespace
}  // namespace tierrt::policy
