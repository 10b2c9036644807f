// Link-aware planning: the copies a plan asks for fit what the link carries in
// each window between launches, prefetches wait for memory where the budget needs
// it, and on the shipped presets, both links and budgets from 25% to 100% of the
// activations off HBM, tierrt is at or below every baseline (modeled).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>
#include <string>

#include "policies/eval/policy_comparison.hpp"
#include "policies/eval/trace_steps.hpp"
#include "policies/eval/transformer_synth.hpp"
#include "policies/link_schedule.hpp"
#include "policies/planner.hpp"
#include "policies/prefetch_placement.hpp"
#include "test_models.hpp"

namespace tierrt::policy {
namespace {

// ---- hand-made steps

// Blocks 0 (A, 200 bytes) and 1 (B, 900 bytes) written by launch 0, read again
// by launches 3 and 4; launches of 100, 500, 500, 100 and 100 ns.
StepTimeline two_block_step() {
  LiveBlocks live;
  const Trace t{Event::alloc(1, 200), Event::alloc(2, 900), Event::launch(0, 100), Event::use(1, 0), Event::use(2, 0),
                Event::launch(1, 500), Event::launch(2, 500), Event::launch(3, 100), Event::use(1, 3),
                Event::launch(4, 100), Event::use(2, 4)};
  return build_timeline(t, live);
}

TEST(LinkSchedule, ASpillQueuedBehindAnotherCanMissItsWindow) {
  const StepTimeline tl = two_block_step();
  const LinkModel link = parse_link("1,1");  // one byte per ns each way
  const auto start = ideal_start_times(tl);  // 0 100 600 1100 1200 | 1300
  // Both leave after launch 0; A comes back when launch 2 is issued (600 ns), B
  // when launch 3 is (1100 ns).
  const TriggerTable plan({{0, Action::Spill, 0, 0}, {0, Action::Spill, 1, 0}, {2, Action::Prefetch, 0, 0},
                           {3, Action::Prefetch, 1, 0}},
                          static_cast<std::uint32_t>(tl.ops.size()));
  const LinkSchedule s = schedule_copies(tl, plan, start, link);
  ASSERT_EQ(s.d2h.size(), 2u);
  ASSERT_EQ(s.h2d.size(), 2u);
  EXPECT_DOUBLE_EQ(s.d2h[0].end_ns, 300);   // A: 100 + 200
  EXPECT_TRUE(s.d2h[0].fits());             // due 600
  EXPECT_DOUBLE_EQ(s.d2h[1].start_ns, 300);  // B waits for A
  EXPECT_DOUBLE_EQ(s.d2h[1].end_ns, 1200);
  EXPECT_DOUBLE_EQ(s.d2h[1].due_ns, 1100);
  EXPECT_EQ(s.late_spills(), std::vector<std::uint32_t>{1});
  EXPECT_EQ(s.late_fetches(), std::vector<std::uint32_t>{1});  // B's fetch: 1100 + 900 > 1200
  EXPECT_FALSE(s.fits());
  // Behind both spills, or on an idle engine.
  EXPECT_DOUBLE_EQ(s.spill_end_if_queued(150, 100, link), 1300);
  EXPECT_DOUBLE_EQ(s.spill_end_if_queued(50, 100, link), 150);
  // Alone, B fits its window.
  const TriggerTable only_b({{0, Action::Spill, 1, 0}, {3, Action::Prefetch, 1, 0}},
                            static_cast<std::uint32_t>(tl.ops.size()));
  EXPECT_TRUE(schedule_copies(tl, only_b, start, link).d2h[0].fits());
}

TEST(LinkSchedule, FirstLaunchIssuedAfterATime) {
  const StepTimeline tl = two_block_step();
  const auto start = ideal_start_times(tl);  // launches end at 100 600 1100 1200 1300
  EXPECT_EQ(first_issued_at_or_after(tl, start, 0), 0u);
  EXPECT_EQ(first_issued_at_or_after(tl, start, 100), 1u);
  EXPECT_EQ(first_issued_at_or_after(tl, start, 300), 2u);
  EXPECT_EQ(first_issued_at_or_after(tl, start, 1250), 5u);  // none: the launch count
}

// Block A (100 bytes) idle from launch 0 to launch 4 on a link so slow that the
// link alone would bring it back right after it left; launch 2 allocates a
// temporary of `temporary` bytes.
StepTimeline idle_block_step(std::uint64_t temporary) {
  LiveBlocks live;
  const Trace t{Event::alloc(1, 100), Event::launch(0, 10), Event::use(1, 0), Event::launch(1, 10),
                Event::alloc(2, temporary), Event::launch(2, 10), Event::use(2, 2), Event::free(2),
                Event::launch(3, 10), Event::launch(4, 10), Event::use(1, 4)};
  return build_timeline(t, live);
}

std::uint32_t prefetch_launch(const StepTimeline& tl, std::uint64_t budget, MemoryFloor floor) {
  const auto start = ideal_start_times(tl);
  const SpilledBlock a{0, 100, IdleGap{0, 4, static_cast<double>(start[4] - start[1])}, 0};
  return place_prefetches(tl, std::span(&a, 1), start, parse_link("0.001,0.001"), {}, budget, floor).front();
}

TEST(PrefetchPlacement, MemoryFloorWaitsUntilTheLaunchesBeforeTheUseHaveRoom) {
  // Budget 150: with A back, launch 2 (A + a 100-byte temporary) would be 50 over.
  const StepTimeline coverable = idle_block_step(100);
  EXPECT_EQ(prefetch_launch(coverable, 150, MemoryFloor::None), 1u);  // as early as the link wants it
  EXPECT_EQ(prefetch_launch(coverable, 150, MemoryFloor::WhereCoverable), 3u);
  EXPECT_EQ(prefetch_launch(coverable, 150, MemoryFloor::Strict), 3u);
  // A 300-byte temporary is over budget whether A is off or not: only the strict
  // floor holds the prefetch behind it.
  const StepTimeline uncoverable = idle_block_step(300);
  EXPECT_EQ(prefetch_launch(uncoverable, 150, MemoryFloor::WhereCoverable), 1u);
  EXPECT_EQ(prefetch_launch(uncoverable, 150, MemoryFloor::Strict), 3u);
}

// ---- the planner on whole steps

// One copy a plan asks for: it may start once queued and must be done when due.
struct CopyWindow {
  double ready = 0, due = 0, bytes = 0;
};

// The windows of a plan's copies on the timeline the step model gave it, derived
// here from the triggers alone: a spill is queued when its launch ends and is due
// when its block's prefetch is issued (a launch is issued when the one before it
// ends), or at its next use when none is; a prefetch is queued when issued and
// due at the block's next use.
void copy_windows(const StepTimeline& tl, const StepPlan& plan, const std::vector<double>& t,
                  std::vector<CopyWindow>& out, std::vector<CopyWindow>& back) {
  auto end = [&](std::uint32_t op) { return t[op] + static_cast<double>(tl.ops[op].duration_ns); };
  auto issue = [&](std::uint32_t op) { return op == 0 ? t[0] : end(op - 1); };
  auto use_from = [&](std::uint32_t b, std::uint32_t op) {
    for (std::uint32_t u : tl.uses_of(b))
      if (u >= op) return t[u];
    return t.back();
  };
  for (const Trigger& tr : plan.triggers.all()) {
    ASSERT_LT(tr.ordinal, tl.by_ordinal.size());
    const std::uint32_t b = tl.by_ordinal[tr.ordinal];
    const double bytes = static_cast<double>(tl.blocks[b].bytes);
    if (tr.action == Action::Spill) {
      double due = use_from(b, tr.op + 1);
      for (const Trigger& p : plan.triggers.all())
        if (p.action == Action::Prefetch && p.ordinal == tr.ordinal && p.op > tr.op) {
          due = issue(p.op);
          break;
        }
      out.push_back({end(tr.op), due, bytes});
    } else if (tr.action == Action::Prefetch) {
      back.push_back({issue(tr.op), use_from(b, tr.op), bytes});
    }
  }
}

// The most the bytes that must cross within a window [a, b] exceed what the link
// carries in it (b - a at `bytes_per_ns`), over every window bounded by a copy's
// ready time and another's due time. Positive: more traffic than the link carries.
double worst_overload(std::vector<CopyWindow> w, double bytes_per_ns) {
  std::sort(w.begin(), w.end(), [](const CopyWindow& x, const CopyWindow& y) { return x.ready < y.ready; });
  double worst = -std::numeric_limits<double>::infinity();
  std::vector<CopyWindow> from;  // copies ready no earlier than `a`, by due time
  for (std::size_t i = w.size(); i-- > 0;) {
    const double a = w[i].ready;
    from.insert(std::upper_bound(from.begin(), from.end(), w[i].due,
                                 [](double d, const CopyWindow& c) { return d < c.due; }),
                w[i]);
    double bytes = 0;
    for (const CopyWindow& c : from) {
      bytes += c.bytes;
      worst = std::max(worst, bytes - (c.due - a) * bytes_per_ns);
    }
  }
  return worst;
}

// Returns how many copies the plan asks for.
std::size_t expect_traffic_fits(const StepTimeline& tl, std::uint64_t budget, const LinkModel& link,
                                const std::string& what) {
  const PlanResult r = plan_step(tl, budget, link, {});
  if (r.modeled.launch_start_ns.size() != tl.ops.size() + 1) {
    ADD_FAILURE() << what << ": no launch times";
    return 0;
  }
  std::vector<CopyWindow> out, back;
  copy_windows(tl, r.plan, r.modeled.launch_start_ns, out, back);
  EXPECT_EQ(out.size(), r.spilled.size()) << what;
  // A byte of slack per window for the rounding of two clocks.
  EXPECT_LE(worst_overload(out, link.d2h_bytes_per_s / 1e9), 1.0) << what << ": D2H";
  EXPECT_LE(worst_overload(back, link.h2d_bytes_per_s / 1e9), 1.0) << what << ": H2D";
  return out.size() + back.size();
}

std::uint64_t budget_for(const StepTimeline& tl, double fraction) {
  const auto profile = tl.resident_profile();
  const auto peak_it = std::max_element(profile.begin(), profile.end());
  const auto peak = static_cast<std::uint32_t>(peak_it - profile.begin());
  std::uint64_t at_peak = 0;
  for (const BlockRecord& b : tl.blocks)
    if (b.cls == LifetimeClass::Activation && b.alloc_op <= peak && (b.free_op == kNever || peak < b.free_op))
      at_peak += b.bytes;
  return *peak_it - static_cast<std::uint64_t>(fraction * static_cast<double>(at_peak));
}

constexpr double kFractions[] = {0.25, 0.5, 0.75, 1.0};

TEST(LinkAwarePlanning, PlannedTrafficFitsEveryWindowOnThePresets) {
  std::size_t copies = 0;
  for (const std::string& model : model_names()) {
    SynthOptions o;
    o.model = *find_model(model);
    o.shape = default_shape(o.model);
    o.steps = 2;
    const auto a = analyse_trace(synthesize(o));
    ASSERT_FALSE(a.steps.empty());
    for (const char* link : {"pcie5", "c2c"})
      for (double f : kFractions)
        copies += expect_traffic_fits(a.steps.back(), budget_for(a.steps.back(), f), parse_link(link),
                                      model + " " + link + " " + std::to_string(f));
  }
  EXPECT_GT(copies, 10000u);
}

TEST(LinkAwarePlanning, PlannedTrafficFitsEveryWindowOnRandomSteps) {
  std::size_t copies = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    const auto a = analyse_trace(test::random_trace(seed));
    if (a.steps.empty()) continue;
    const StepTimeline& tl = a.steps.back();
    const auto profile = tl.resident_profile();
    const std::uint64_t peak = *std::max_element(profile.begin(), profile.end());
    for (double keep : {0.9, 0.7, 0.5})
      for (const char* link : {"pcie5", "2,1"})
        copies += expect_traffic_fits(tl, static_cast<std::uint64_t>(keep * static_cast<double>(peak)),
                                      parse_link(link),
                                      "seed " + std::to_string(seed) + " " + link + " keep " + std::to_string(keep));
  }
  EXPECT_GT(copies, 100u) << "the random steps hardly give the planner anything to move";
}

const PolicyFigures& figures(const Comparison& c, const std::string& name) {
  for (const auto& p : c.policies)
    if (p.name == name) return p;
  throw std::runtime_error("no policy " + name);
}

struct PresetLink {
  const char* model;
  const char* link;
};

class AgainstTheBaselines : public ::testing::TestWithParam<PresetLink> {};

// Recomputing baselines run another step (fewer bytes to move), so the lower
// bound of the recorded step's copy schedules does not hold them: where one is
// faster than 1.10x the bound, no copy schedule is asked to match it (the table
// shows it, with vs bound "-"). Everything else tierrt must match or beat.
TEST_P(AgainstTheBaselines, AtOrBelowEachBaselineAtEveryBudget) {
  const auto& p = GetParam();
  SynthOptions o;
  o.model = *find_model(p.model);
  o.shape = default_shape(o.model);
  const auto a = analyse_trace(synthesize(o));
  for (double fraction : kFractions) {
    BudgetChoice b;
    b.offload_fraction = fraction;
    const auto c = compare_policies(a.steps, policy_names(), parse_link(p.link), b, false);
    const std::string at = std::string(p.model) + " " + p.link + " " + std::to_string(fraction);
    const auto& t = figures(c, "tierrt");
    ASSERT_TRUE(c.bound.feasible) << at;
    EXPECT_EQ(t.steady.over_budget_bytes, 0u) << at;
    for (const auto& f : c.policies) {
      if (f.name == "none" || f.name == "tierrt") continue;
      if (f.recomputes && f.steady.step_ns < 1.10 * c.bound.step_ns()) continue;
      EXPECT_LE(t.steady.step_ns, f.steady.step_ns * (1 + 1e-9)) << at << ": slower than " << f.name;
    }
    if (fraction == 1.0 && std::string(p.link) == "pcie5") {
      EXPECT_LE(t.steady.step_ns, 1.10 * c.bound.step_ns()) << at << ": over 1.10x the bound";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, AgainstTheBaselines,
                         ::testing::Values(PresetLink{"llama3.1-8b", "pcie5"}, PresetLink{"llama3.1-8b", "c2c"},
                                           PresetLink{"llama3.1-70b", "pcie5"}, PresetLink{"llama3.1-70b", "c2c"},
                                           PresetLink{"llama3.1-405b", "pcie5"}, PresetLink{"llama3.1-405b", "c2c"},
                                           PresetLink{"deepseek-v3", "pcie5"}, PresetLink{"deepseek-v3", "c2c"}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.model) + "_" + info.param.link;
                           std::replace_if(n.begin(), n.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
                           return n;
                         });

}  // namespace
}  // namespace tierrt::policy
