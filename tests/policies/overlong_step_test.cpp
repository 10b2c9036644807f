// A step is learned from the events it buffers; one longer than
// Options::max_step_events is let go. The buffer stays bounded whatever
// runs (a job that stops marking steps, launches that never repeat), the
// overlong step is not learned, and the steps after it are learned and
// planned as before.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "policies/eval/trace_steps.hpp"
#include "policies/eval/transformer_synth.hpp"
#include "policies/policy_engine.hpp"
#include "test_models.hpp"

namespace tierrt::policy {
namespace {

struct Steps {
  Trace trace;            // with markers
  std::size_t longest = 0;  // events between two markers, at most
  std::uint64_t budget = 0;
};

Steps training_steps(std::uint32_t count) {
  auto o = test::tiny_options(test::tiny_dense(), count);
  o.step_markers = true;
  Steps s;
  s.trace = synthesize(o);
  std::size_t since = 0;
  for (const Event& e : s.trace) {
    if (e.kind == EventKind::Step) {
      s.longest = std::max(s.longest, since);
      since = 0;
    } else {
      ++since;
    }
  }
  s.longest = std::max(s.longest, since);
  const auto profile = analyse_trace(s.trace).steps[0].resident_profile();
  s.budget = *std::max_element(profile.begin(), profile.end()) * 8 / 10;
  return s;
}

// Launches that never repeat: each names a random set of blocks of random
// sizes, some allocated and freed on the way (no period to find).
class Unrepeating {
 public:
  explicit Unrepeating(std::uint64_t seed) : rng_(seed) {}
  template <class Feed>
  void run(std::size_t events, Feed&& feed) {
    for (std::size_t n = 0; n < events;) {
      if (live_.size() < 4 || rng_() % 7 == 0) {
        live_.push_back(next_);
        feed(Event::alloc(next_, (1 + rng_() % 64) << 16)), ++n;
        next_ += 8u << 20;
      }
      feed(Event::launch(seq_, 1000 + rng_() % 5000)), ++n;
      for (std::uint64_t k = 1 + rng_() % 6; k > 0; --k) feed(Event::use(live_[rng_() % live_.size()], seq_)), ++n;
      ++seq_;
      if (live_.size() > 16) {
        const std::size_t victim = rng_() % live_.size();
        feed(Event::free(live_[victim])), ++n;
        live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(victim));
      }
    }
  }
  std::uint64_t next_seq() const { return seq_; }

 private:
  std::mt19937_64 rng_;
  std::vector<BlockId> live_;
  BlockId next_ = 0x7000'0000'0000;  // far from the synthesized steps' blocks
  std::uint64_t seq_ = 1u << 30;
};

// The engine planning for `s`, holding at most `max_events` events of a step.
PolicyEngine::Options limited_to(const Steps& s, std::size_t max_events) {
  PolicyEngine::Options o{s.budget, parse_link("pcie5"), {}};
  o.max_step_events = max_events;
  return o;
}

// A launch names at most this many blocks: the buffer may pass the limit by
// one launch's uses, since only whole launches are let go.
constexpr std::size_t kUsesPerLaunch = 64;

TEST(OverlongStep, WithMarkersAStepPastTheLimitIsLetGoAndTheStepsAfterItArePlanned) {
  const Steps s = training_steps(6);
  const PolicyEngine::Options o = limited_to(s, 2 * s.longest);
  PolicyEngine engine(o);
  Unrepeating junk(11);
  std::size_t markers = 0, most = 0, completed_before = 0;
  bool followed_in_last = false, triggers_in_last = false;
  for (const Event& e : s.trace) {
    if (e.kind == EventKind::Launch && markers == 6) triggers_in_last |= !engine.triggers_ahead(0).empty();
    engine.record(e);
    most = std::max(most, engine.buffered_events());
    if (e.kind != EventKind::Step) continue;
    ++markers;
    // The third step runs ten limits long before its own launches come.
    if (markers == 3) {
      completed_before = engine.steps_completed();
      junk.run(10 * o.max_step_events, [&](const Event& j) {
        engine.record(j);
        most = std::max(most, engine.buffered_events());
        if (engine.overlong_steps() > 0) {
          EXPECT_FALSE(engine.following_plan()) << "a plan followed from the middle of a step let go of";
        }
      });
    }
    if (markers == 6) followed_in_last = engine.following_plan();
  }
  EXPECT_LE(most, o.max_step_events + kUsesPerLaunch);
  EXPECT_GE(engine.overlong_steps(), 10u);
  // Steps 0 and 1 were learned before it; step 2 (let go) is not, step 3
  // opens at its marker as the first step did, and steps 3 and 4 end.
  EXPECT_EQ(completed_before, 2u);
  EXPECT_EQ(engine.steps_completed(), completed_before + 2);
  EXPECT_TRUE(followed_in_last) << "the steps after the overlong one were not planned";
  EXPECT_TRUE(triggers_in_last);
  EXPECT_TRUE(engine.following_plan());
}

TEST(OverlongStep, WithoutMarkersLaunchesThatNeverRepeatStayBoundedAndAStepThatComesIsFound) {
  const Steps s = training_steps(12);
  const PolicyEngine::Options o = limited_to(s, 8 * s.longest);
  PolicyEngine engine(o);
  Unrepeating junk(5);
  std::size_t most = 0;
  junk.run(20 * o.max_step_events, [&](const Event& j) {
    engine.record(j);
    most = std::max(most, engine.buffered_events());
  });
  EXPECT_LE(most, o.max_step_events + kUsesPerLaunch);
  EXPECT_GE(engine.overlong_steps(), 19u);
  EXPECT_EQ(engine.steps_completed(), 0u) << "a step was found in launches that never repeat";
  bool followed = false;
  for (const Event& e : s.trace) {
    if (e.kind == EventKind::Step) continue;  // the engine finds the steps itself
    engine.record(e);
    most = std::max(most, engine.buffered_events());
    followed |= engine.following_plan();
  }
  EXPECT_LE(most, o.max_step_events + kUsesPerLaunch);
  EXPECT_GE(engine.steps_completed(), 3u);
  EXPECT_TRUE(followed) << "the training steps after the junk were not planned";
}

// The limit as shipped holds a long step whole: the events of a step a
// hundred times the tiny model's are not let go.
TEST(OverlongStep, TheDefaultLimitKeepsLongStepsWhole) {
  const Steps s = training_steps(3);
  PolicyEngine::Options o{s.budget, parse_link("pcie5"), {}};
  EXPECT_GE(o.max_step_events, 100 * s.longest);
  PolicyEngine engine(o);
  for (const Event& e : s.trace) engine.record(e);
  EXPECT_EQ(engine.overlong_steps(), 0u);
  EXPECT_EQ(engine.steps_completed(), 2u);
}

}  // namespace
}  // namespace tierrt::policy
