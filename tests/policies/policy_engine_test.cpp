// The engine as the runtime will drive it: events in one at a time, triggers out per
// launch, with and without step markers, through an eval step.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <utility>
#include <vector>

#include "policies/eval/trace_steps.hpp"
#include "policies/eval/transformer_synth.hpp"
#include "policies/planner.hpp"
#include "policies/policy_engine.hpp"
#include "test_models.hpp"

namespace tierrt::policy {
namespace {

struct StepLog {
  std::vector<Trigger> triggers;  // as handed out, in launch order
  bool followed_at_end = false;
  std::set<BlockId> allocated;
  bool blocks_resolved = true;    // every trigger's ordinal named a block of this step
};

struct Fixture {
  Trace trace;                     // with markers
  std::vector<std::size_t> step_of;  // step index of each event (-1 as max before the first)
  std::uint64_t budget = 0;
};

Fixture make(bool eval) {
  auto o = test::tiny_options(test::tiny_dense(), 5);
  o.step_markers = true;
  if (eval) o.eval_after = 3;
  Fixture f;
  f.trace = synthesize(o);
  std::size_t step = static_cast<std::size_t>(-1);
  for (const Event& e : f.trace) {
    if (e.kind == EventKind::Step) ++step;
    f.step_of.push_back(step);
  }
  const auto a = analyse_trace(f.trace);
  const auto profile = a.steps[0].resident_profile();
  f.budget = *std::max_element(profile.begin(), profile.end()) * 8 / 10;
  return f;
}

std::vector<StepLog> drive(PolicyEngine& engine, const Fixture& f, bool with_markers) {
  std::vector<StepLog> logs;
  for (std::size_t i = 0; i < f.trace.size(); ++i) {
    const Event& e = f.trace[i];
    const std::size_t step = f.step_of[i];
    if (step != static_cast<std::size_t>(-1) && logs.size() <= step) {
      if (!logs.empty()) logs.back().followed_at_end = engine.following_plan();
      logs.emplace_back();
    }
    if (e.kind == EventKind::Step && !with_markers) continue;
    if (e.kind == EventKind::Launch && !logs.empty()) {
      for (const Trigger& t : engine.triggers_ahead(0)) {
        logs.back().triggers.push_back(t);
        auto b = engine.block_of(t.ordinal);
        logs.back().blocks_resolved &= b.has_value() && (t.action != Action::Spill || logs.back().allocated.count(*b));
      }
    }
    engine.record(e);
    if (e.kind == EventKind::Alloc && !logs.empty()) logs.back().allocated.insert(e.a);
  }
  logs.back().followed_at_end = engine.following_plan();
  return logs;
}

TEST(PolicyEngine, WithMarkersFollowsThePlanOfTheLearnedStep) {
  const Fixture f = make(false);
  PolicyEngine engine({f.budget, parse_link("pcie5"), {}});
  const auto logs = drive(engine, f, true);
  ASSERT_EQ(logs.size(), 5u);
  EXPECT_TRUE(logs[0].triggers.empty()) << "planned before anything was learned";
  // Step 1 runs the plan made from step 0, trigger for trigger.
  const auto a = analyse_trace(f.trace);
  const auto expected = plan_step(a.steps[0], f.budget, parse_link("pcie5"), {}).plan.triggers.all();
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(logs[1].triggers, expected);
  for (std::size_t s = 1; s < logs.size(); ++s) {
    EXPECT_TRUE(logs[s].followed_at_end) << "step " << s;
    EXPECT_TRUE(logs[s].blocks_resolved) << "step " << s;
    EXPECT_FALSE(logs[s].triggers.empty()) << "step " << s;
  }
  EXPECT_EQ(engine.steps_completed(), 4u);  // the last step is still open
}

// `plan` is the training step's full trigger sequence. Without markers, the step
// after the eval step is only recognised once its first tokens have been seen, so
// its first launches run reactively: it must get the rest of the plan.
void expect_eval_handled(const std::vector<StepLog>& logs, const std::vector<Trigger>& plan, bool markers) {
  ASSERT_EQ(logs.size(), 6u);  // 3 training, eval, 2 training
  ASSERT_FALSE(plan.empty());
  EXPECT_FALSE(logs[3].followed_at_end) << "followed the training plan through the eval step";
  EXPECT_LT(logs[3].triggers.size(), plan.size());
  for (std::size_t s : {4u, 5u}) {
    EXPECT_TRUE(logs[s].followed_at_end) << "step " << s;
    EXPECT_TRUE(logs[s].blocks_resolved) << "step " << s;
    if (markers || s == 5) {
      EXPECT_EQ(logs[s].triggers, plan) << "step " << s;
      continue;
    }
    ASSERT_FALSE(logs[s].triggers.empty());
    const std::uint32_t first = logs[s].triggers.front().op;
    EXPECT_LT(first, 40u) << "resynchronised late";
    std::vector<Trigger> rest;
    for (const Trigger& t : plan)
      if (t.op >= first) rest.push_back(t);
    EXPECT_EQ(logs[s].triggers, rest);
  }
}

TEST(PolicyEngine, WithMarkersAnEvalStepStopsThePlanAndTrainingResumesIt) {
  const Fixture f = make(true);
  PolicyEngine engine({f.budget, parse_link("pcie5"), {}});
  const auto logs = drive(engine, f, true);
  ASSERT_EQ(logs.size(), 6u);
  expect_eval_handled(logs, logs[2].triggers, true);
}

TEST(PolicyEngine, WithoutMarkersLearnsTheStepAndFindsItsBoundaries) {
  const Fixture f = make(true);
  PolicyEngine marked({f.budget, parse_link("pcie5"), {}});
  const auto reference = drive(marked, f, true);
  PolicyEngine engine({f.budget, parse_link("pcie5"), {}});
  const auto logs = drive(engine, f, false);
  // Detection needs two complete steps and a third begun; the plan starts after.
  EXPECT_GE(engine.steps_completed(), 4u);
  EXPECT_TRUE(logs[0].triggers.empty());
  expect_eval_handled(logs, reference[2].triggers, false);
}

TEST(PolicyEngine, ShapeChangeIsLearnedAnewWithAndWithoutMarkers) {
  for (bool markers : {true, false}) {
    SCOPED_TRACE(markers ? "markers" : "no markers");
    auto o = test::tiny_options(test::tiny_dense(), 9);
    o.step_markers = true;  // the fixture needs them to tell steps apart; the engine may not see them
    o.change_after = 3;
    o.changed_seq = 512;
    Fixture f;
    f.trace = synthesize(o);
    std::size_t step = static_cast<std::size_t>(-1);
    for (const Event& e : f.trace) {
      if (e.kind == EventKind::Step) ++step;
      f.step_of.push_back(step);
    }
    const auto a = analyse_trace(f.trace);
    const auto profile = a.steps.back().resident_profile();
    f.budget = *std::max_element(profile.begin(), profile.end()) * 8 / 10;
    PolicyEngine engine({f.budget, parse_link("pcie5"), {}});
    const auto logs = drive(engine, f, markers);
    ASSERT_EQ(logs.size(), 9u);
    EXPECT_FALSE(logs[3].followed_at_end) << "followed the old shape's plan after the change";
    EXPECT_TRUE(logs[8].followed_at_end);
    EXPECT_FALSE(logs[8].triggers.empty());
    EXPECT_TRUE(logs[8].blocks_resolved);
    const auto expected = plan_step(a.steps[7], f.budget, parse_link("pcie5"), {}).plan.triggers.all();
    EXPECT_EQ(logs[8].triggers, expected);
  }
}

TEST(PolicyEngine, MoverReportsFeedThePlanner) {
  const Fixture f = make(false);
  PolicyEngine engine({f.budget, parse_link("pcie5"), {}});
  std::size_t step = static_cast<std::size_t>(-1);
  std::uint32_t reported_ordinal = 0;
  bool reported = false;
  for (const Event& e : f.trace) {
    if (e.kind == EventKind::Step) ++step;
    if (step == 2 && e.kind == EventKind::Launch && !reported) {
      for (const Trigger& t : engine.triggers_ahead(0))
        if (t.action == Action::Prefetch && !reported) {
          reported_ordinal = t.ordinal;
          engine.report_late(t.ordinal, 1e6);
          engine.report_demand_fetch(t.ordinal);
          reported = true;
        }
    }
    engine.record(e);
  }
  ASSERT_TRUE(reported);
  (void)reported_ordinal;
  EXPECT_EQ(engine.planner().late_prefetches(), 1u);
  EXPECT_EQ(engine.planner().mispredictions(), 1u);
}


// The step-`step` plan's prefetch launch for `ordinal` (UINT32_MAX: none), with
// `report` called at the first launch of step 2 of the trace.
template <class Report>
std::uint32_t prefetch_op_in_step(const Fixture& f, const char* link, std::size_t step_wanted, std::uint32_t ordinal,
                                  Report report) {
  PolicyEngine engine({f.budget, parse_link(link), {}});
  std::size_t step = static_cast<std::size_t>(-1);
  std::uint32_t launch = 0, found = UINT32_MAX;
  bool reported = false;
  for (const Event& e : f.trace) {
    if (e.kind == EventKind::Step) ++step, launch = 0;
    if (e.kind == EventKind::Launch) {
      if (step == 2 && !reported) report(engine), reported = true;
      if (step == step_wanted)
        for (const Trigger& t : engine.triggers_ahead(0))
          if (t.action == Action::Prefetch && t.ordinal == ordinal && found == UINT32_MAX) found = launch;
      ++launch;
    }
    engine.record(e);
  }
  return found;
}

// A late prefetch starts earlier in the next step's plan; a demand fetch counts
// as late by the whole fetch (as the simulator counts it).
TEST(PolicyEngine, LateAndDemandedFetchesStartThatPrefetchEarlierNextStep) {
  const Fixture f = make(false);
  // A block the plan prefetches in step 2, and its bytes.
  PolicyEngine probe({f.budget, parse_link("pcie5"), {}});
  std::size_t step = static_cast<std::size_t>(-1);
  std::uint32_t ordinal = UINT32_MAX;
  for (const Event& e : f.trace) {
    if (e.kind == EventKind::Step) ++step;
    if (step == 2 && e.kind == EventKind::Launch && ordinal == UINT32_MAX)
      for (const Trigger& t : probe.triggers_ahead(0))
        if (t.action == Action::Prefetch && ordinal == UINT32_MAX) ordinal = t.ordinal;
    if (step == 2 && ordinal != UINT32_MAX) break;
    probe.record(e);
  }
  ASSERT_NE(ordinal, UINT32_MAX);
  std::uint64_t bytes = 0;
  step = static_cast<std::size_t>(-1);
  std::uint32_t allocs = 0;
  for (const Event& e : f.trace) {
    if (e.kind == EventKind::Step) ++step;
    if (step == 2 && e.kind == EventKind::Alloc && allocs++ == ordinal) bytes = e.b;
  }
  ASSERT_GT(bytes, 0u);
  const char* link = "pcie5";
  const std::uint32_t unreported = prefetch_op_in_step(f, link, 3, ordinal, [](PolicyEngine&) {});
  ASSERT_NE(unreported, UINT32_MAX);
  const std::uint32_t late =
      prefetch_op_in_step(f, link, 3, ordinal, [&](PolicyEngine& e) { e.report_late(ordinal, 1e7); });
  EXPECT_LT(late, unreported);

  // The demand fetch's lead is the block's fetch time on the link.
  auto lead_after = [&](auto report) {
    PolicyEngine engine({f.budget, parse_link(link), {}});
    std::size_t s = static_cast<std::size_t>(-1);
    bool reported = false;
    for (const Event& e : f.trace) {
      if (e.kind == EventKind::Step) ++s;
      if (s == 2 && e.kind == EventKind::Launch && !reported) report(engine), reported = true;
      engine.record(e);
      if (s == 3) break;  // step 2 closed at the marker
    }
    return engine.planner().lead_ns(ordinal);
  };
  EXPECT_EQ(lead_after([](PolicyEngine&) {}), 0.0);
  const double fetch_ns = parse_link(link).h2d_ns(static_cast<double>(bytes));
  // The feedback search scales every correction by the same step size.
  const double demanded = lead_after([&](PolicyEngine& e) { e.report_demand_fetch(ordinal); });
  const double late_by = lead_after([&](PolicyEngine& e) { e.report_late(ordinal, 5e5); });
  EXPECT_GT(demanded, 0.0);
  EXPECT_NEAR(demanded / fetch_ns, late_by / 5e5, 1e-9);
}

TEST(PolicyEngine, OrdinalOfAnswersBlockOfBackwards) {
  const Fixture f = make(false);
  PolicyEngine engine({f.budget, parse_link("pcie5"), {}});
  std::size_t checked = 0;
  for (const Event& e : f.trace) {
    engine.record(e);
    if (e.kind != EventKind::Alloc) continue;
    const auto ord = engine.ordinal_of(e.a);
    ASSERT_TRUE(ord.has_value());
    EXPECT_EQ(engine.block_of(*ord), e.a);
    ++checked;
  }
  EXPECT_GT(checked, 100u);
  EXPECT_FALSE(engine.ordinal_of(0xdead0000).has_value());
}

TEST(PolicyEngine, TriggersAheadAreTheNextLaunchesOwn) {
  const Fixture f = make(false);
  PolicyEngine engine({f.budget, parse_link("pcie5"), {}});
  std::vector<Trigger> ahead;
  std::size_t compared = 0, step = static_cast<std::size_t>(-1);
  bool have = false;
  std::uint32_t allocs = 0, ordinals_then = 0;  // blocks of the step, now and when `ahead` was taken
  for (const Event& e : f.trace) {
    if (e.kind == EventKind::Alloc) ++allocs;
    if (e.kind == EventKind::Step) ++step, have = false, allocs = 0;
    if (e.kind == EventKind::Launch && step >= 2 && step != static_cast<std::size_t>(-1)) {
      const auto now = engine.triggers_ahead(0);
      if (have) {
        // What was ahead is now due; a trigger whose block was allocated since
        // is due too (ahead of its allocation it named no block).
        for (const Trigger& t : ahead) EXPECT_NE(std::find(now.begin(), now.end(), t), now.end());
        for (const Trigger& t : now) {
          const bool was_ahead = std::find(ahead.begin(), ahead.end(), t) != ahead.end();
          EXPECT_TRUE(was_ahead || t.ordinal >= ordinals_then);
        }
        compared += !now.empty();
      }
      ordinals_then = allocs;
      const auto next = engine.triggers_ahead(1);
      ahead.assign(next.begin(), next.end());
      have = engine.following_plan();
    }
    engine.record(e);
  }
  EXPECT_GT(compared, 10u);
}


// A launch-heavy run seen through a ring that drops events: blocks allocated
// in bursts, then the same launch over and over (a one-launch "step"), now and
// then without some of its uses or without the launch itself. One event can
// complete two tokens at a step's end; the second must be re-based with the
// step's events, or it points past them.
TEST(PolicyEngine, MarkerlessRunsOfOneRepeatedLaunchWithDropsStayConsistent) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // A sixteenth in the sanitized builds, where its allocations of a step's
  // size each take fresh pages (50 times slower); CI runs it in full in the
  // default build.
  constexpr int kLaunches = 4000;
#else
  constexpr int kLaunches = 64000;
#endif
  PolicyEngine engine({64ull << 30, parse_link("pcie5"), {}});
  std::mt19937_64 rng(7);
  std::uint64_t next_block = 0x100000, seq = 0;
  std::vector<BlockId> live;
  for (std::size_t burst : {100, 900, 9000}) {
    for (std::size_t i = 0; i < burst; ++i) {
      live.push_back(next_block);
      engine.record(Event::alloc(next_block, 2u << 20));
      next_block += 2u << 20;
    }
    for (int l = 0; l < kLaunches; ++l) {
      if (rng() % 200 != 0) engine.record(Event::launch(seq, 1000));
      for (int k = 0; k < 8; ++k)
        if (rng() % 100 != 0) engine.record(Event::use(live[(k * live.size()) / 8], seq));
      ++seq;
      for (const Trigger& t : engine.triggers_ahead(0)) ASSERT_TRUE(engine.block_of(t.ordinal).has_value());
    }
  }
}

// The runtime's ring drops events when the policy thread falls behind; the
// engine then sees uses without their launch, frees of unknown blocks and
// runs cut short. Whatever arrives, it must stay consistent (never index past
// its own events).
TEST(PolicyEngine, AnyEventStreamKeepsTheEngineConsistent) {
  std::mt19937_64 rng(12345);
  for (int round = 0; round < 40; ++round) {
    PolicyEngine engine({256ull << 20, parse_link("pcie5"), {}});
    std::vector<BlockId> live;
    std::uint64_t next_block = 0x100000, seq = 0;
    const int drop_per_mille = static_cast<int>(rng() % 200);
    auto feed = [&](const Event& e) {
      if (static_cast<int>(rng() % 1000) >= drop_per_mille) engine.record(e);
    };
    const int period = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < 6000; ++i) {
      const int phase = i % period;
      if (phase == 0 || live.empty()) {
        live.push_back(next_block);
        feed(Event::alloc(next_block, (1 + rng() % 8) << 20));
        next_block += 16u << 20;
      }
      feed(Event::launch(seq, 1000 + rng() % 100));
      const int uses = 1 + static_cast<int>(rng() % 8);
      for (int k = 0; k < uses; ++k) feed(Event::use(live[rng() % live.size()], seq));
      ++seq;
      if (phase == period - 1 && live.size() > 4 && rng() % 2) {
        const std::size_t victim = rng() % live.size();
        feed(Event::free(live[victim]));
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
      }
      if (rng() % 500 == 0) feed(Event::sync());
      for (const Trigger& t : engine.triggers_ahead(1)) ASSERT_TRUE(engine.block_of(t.ordinal).has_value());
    }
  }
}


// Device durations arrive after the launches were recorded (the runtime
// reads them off timing events); they replace what the host measured in the
// step the planner learns.
TEST(PolicyEngine, LaunchDurationsMeasuredLaterReplaceTheRecordedOnes) {
  auto step_with = [](auto measure) {
    PolicyEngine engine({1ull << 30, parse_link("pcie5"), {}});
    engine.record(Event::step(0));
    engine.record(Event::alloc(0x1000, 1 << 20));
    for (std::uint64_t seq = 100; seq < 120; ++seq) {
      engine.record(Event::launch(seq, 5));  // what the host saw: 5 ns apart
      engine.record(Event::use(0x1000, seq));
    }
    measure(engine);
    engine.record(Event::step(1));
    const StepTimeline* learned = engine.planner().last_timeline();
    return learned ? learned->compute_ns() : 0;
  };
  EXPECT_EQ(step_with([](PolicyEngine&) {}), 20u * 5);
  EXPECT_EQ(step_with([](PolicyEngine& e) {
              EXPECT_EQ(e.set_launch_durations(104, 112, 1000), 8u);
              EXPECT_EQ(e.set_launch_durations(50, 60, 1000), 0u);  // not in this step
            }),
            12u * 5 + 8u * 1000);
}

// The running step hands out a plan's triggers for a pool's granules from
// before the step by their ids: the same blocks in every step.
TEST(PolicyEngine, APoolsGranulesAreHandedOutByTheirIds) {
  constexpr std::uint32_t kGranules = 6;
  const Trace trace = test::pool_trace(kGranules, 100'000'000, 10'000'000, 4);
  PolicyEngine engine({3 * 100'000'000ull, parse_link("pcie5"), {}});
  std::size_t step = static_cast<std::size_t>(-1);
  std::set<std::uint64_t> spilled, fetched;
  for (const Event& e : trace) {
    if (e.kind == EventKind::Step) ++step;
    if (e.kind == EventKind::Launch && step == 3)
      for (std::uint32_t ahead : {0u, 1u})
        for (const Trigger& t : engine.triggers_ahead(ahead)) {
          EXPECT_GE(t.block, 0x1000u);
          EXPECT_LE(t.block, 0x1000u * kGranules);
          if (t.action == Action::Spill) spilled.insert(t.block);
          if (t.action == Action::Prefetch) fetched.insert(t.block);
        }
    engine.record(e);
  }
  EXPECT_GE(spilled.size(), kGranules / 2);
  EXPECT_FALSE(fetched.empty());
}

// The triggers of many launches ahead, asked for together (what the policy
// thread arms each launch), are exactly those each launch's own question
// gives, in launch order, and each says by its op how far ahead it is.
TEST(PolicyEngine, TriggersOfARangeAheadAreEachLaunchsOwn) {
  const Fixture f = make(false);
  PolicyEngine engine({f.budget, parse_link("pcie5"), {}});
  std::size_t compared = 0;
  for (std::size_t i = 0; i < f.trace.size(); ++i) {
    const Event& e = f.trace[i];
    if (e.kind == EventKind::Launch && engine.following_plan())
      for (const auto& [first, last] : {std::pair{1u, 1u}, std::pair{2u, 48u}, std::pair{3u, 7u}, std::pair{5u, 4u}}) {
        std::vector<Trigger> one_by_one;
        for (std::uint32_t ahead = first; ahead <= last; ++ahead)
          for (const Trigger& t : engine.triggers_ahead(ahead)) {
            EXPECT_EQ(t.op, engine.launches_in_step() + ahead);
            one_by_one.push_back(t);
          }
        const auto together = engine.triggers_ahead(first, last);
        ASSERT_EQ(std::vector<Trigger>(together.begin(), together.end()), one_by_one);
        compared += one_by_one.size();
      }
    engine.record(e);
  }
  EXPECT_GT(compared, 100u);  // the plan had triggers ahead to compare
}

// The policy thread polls promptly only while moves_ahead(): it must hold
// whenever a trigger is still to come in the step, and not once the step's
// last one was handed out (else the thread never polls calmly).
TEST(PolicyEngine, MovesAheadWhileATriggerIsStillToCome) {
  const Fixture f = make(false);
  PolicyEngine engine({f.budget, parse_link("pcie5"), {}});
  std::size_t ahead = 0, behind = 0, not_following = 0;
  for (const Event& e : f.trace) {
    if (e.kind == EventKind::Launch) {
      if (!engine.following_plan()) {
        EXPECT_FALSE(engine.moves_ahead());
        ++not_following;
      } else if (!engine.triggers_ahead(0).empty() || !engine.triggers_ahead(1, 1u << 20).empty()) {
        ASSERT_TRUE(engine.moves_ahead()) << "at launch " << engine.launches_in_step() << " of a step";
        ++ahead;
      } else if (!engine.moves_ahead()) {
        ++behind;
      }
    }
    engine.record(e);
  }
  EXPECT_GT(ahead, 100u);         // launches with triggers still to come
  EXPECT_GT(behind, 0u);          // past a step's last trigger
  EXPECT_GT(not_following, 0u);   // learning, before the first plan
}

}  // namespace
}  // namespace tierrt::policy
