// The planner in the step model: the budget holds, it beats the baselines on the
// acceptance configuration, it tells a deviating step apart, and its feedback loop
// moves late prefetches earlier.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "policies/eval/baseline_policies.hpp"
#include "policies/eval/policy_comparison.hpp"
#include "policies/eval/replay.hpp"
#include "policies/eval/tierrt_policy.hpp"
#include "policies/eval/trace_steps.hpp"
#include "policies/eval/transformer_synth.hpp"
#include "policies/planner.hpp"
#include "policies/planner_policy.hpp"
#include "test_models.hpp"

namespace tierrt::policy {
namespace {

const PolicyFigures& figures(const Comparison& c, const std::string& name) {
  for (const auto& p : c.policies)
    if (p.name == name) return p;
  throw std::runtime_error("no policy " + name);
}

struct BudgetCase {
  const char* link;
  double fraction;
  bool moe;
};

class PlanHoldsBudget : public ::testing::TestWithParam<BudgetCase> {};

TEST_P(PlanHoldsBudget, EveryBoundedPolicyStaysWithinTheBudget) {
  const auto& p = GetParam();
  const auto a = analyse_trace(synthesize(test::tiny_options(p.moe ? test::tiny_moe() : test::tiny_dense())));
  BudgetChoice b;
  b.offload_fraction = p.fraction;
  const auto c = compare_policies(a.steps, policy_names(), parse_link(p.link), b, false);
  EXPECT_LT(c.budget, c.peak_without_offload);
  for (const auto& f : c.policies) {
    if (f.name == "none") continue;
    if (f.steady.over_budget_bytes > 0) {
      EXPECT_EQ(f.steady.peak_bytes, c.budget + f.steady.over_budget_bytes) << f.name;
    } else {
      EXPECT_LE(f.steady.peak_bytes, c.budget) << f.name;
    }
    // Whatever a plan leaves over, the safe reactive fallback must make fit.
    EXPECT_EQ(f.steady.over_budget_bytes, 0u) << f.name;
    EXPECT_EQ(f.first.over_budget_bytes, 0u) << f.name << " (learning step)";
    // The bound is for copy schedules of the recorded step; a recomputing baseline
    // runs another step and may go below it.
    if (f.steady.over_budget_bytes == 0 && !f.recomputes) {
      EXPECT_GE(f.steady.step_ns + 1e-6, c.bound.step_ns()) << f.name << " beat the lower bound";
    }
  }
  const auto& t = figures(c, "tierrt");
  EXPECT_LE(t.steady.step_ns, c.bound.step_ns() * 1.05);
  // Among policies that only move tensors; against recompute (checkpoint, jax) tierrt
  // can lose where the link is slow, and the table says so.
  for (const auto& f : c.policies) {
    if (f.name != "none" && !f.recomputes) {
      EXPECT_LE(t.steady.step_ns, f.steady.step_ns * (1 + 1e-9)) << "slower than " << f.name;
    }
  }
  // Demand fetches only where activations alone cannot meet the budget (then the
  // fallback must evict weights, which come back on demand).
  if (p.fraction <= 0.5) {
    EXPECT_EQ(t.steady.demand_fetches, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Budgets, PlanHoldsBudget,
                         ::testing::Values(BudgetCase{"pcie5", 0.25, false}, BudgetCase{"pcie5", 0.5, false},
                                           BudgetCase{"pcie5", 0.8, false}, BudgetCase{"c2c", 0.5, false},
                                           BudgetCase{"c2c", 0.9, false}, BudgetCase{"pcie5", 0.5, true},
                                           BudgetCase{"c2c", 0.8, true}, BudgetCase{"20,10", 0.5, false}));

// Acceptance (modeled): Llama-3.1-70B, sequence 8192, micro-batch 1, TP 8 on pcie5
// at a budget forcing half the activation bytes at the peak off HBM.
TEST(PlannerAcceptance, Llama70bOnPcie5AtHalfTheActivations) {
  SynthOptions o;
  o.model = *find_model("llama3.1-70b");
  o.shape = default_shape(o.model);
  ASSERT_EQ(o.shape.seq, 8192u);
  ASSERT_EQ(o.shape.tp, 8u);
  const auto a = analyse_trace(synthesize(o));
  BudgetChoice b;
  b.offload_fraction = 0.5;
  const auto c = compare_policies(a.steps, policy_names(), parse_link("pcie5"), b, false);
  const auto& t = figures(c, "tierrt");
  ASSERT_TRUE(c.bound.feasible);
  EXPECT_GE(t.activation_off, 0.5);
  EXPECT_EQ(t.steady.over_budget_bytes, 0u);
  EXPECT_LE(t.steady.step_ns, 1.01 * c.bound.step_ns());
  for (const auto& f : c.policies) {
    if (f.name == "none" || f.name == "tierrt") continue;
    EXPECT_LT(t.steady.step_ns, f.steady.step_ns) << "not below " << f.name;
  }
}

// Acceptance (modeled): on c2c, every activation off HBM at under 1% overhead.
TEST(PlannerAcceptance, Llama70bOnC2cAllActivationsOff) {
  SynthOptions o;
  o.model = *find_model("llama3.1-70b");
  o.shape = default_shape(o.model);
  const auto a = analyse_trace(synthesize(o));
  BudgetChoice b;
  b.offload_all = true;
  const auto c = compare_policies(a.steps, {"none", "tierrt"}, parse_link("c2c"), b, false);
  const auto& t = figures(c, "tierrt");
  EXPECT_GE(t.activation_off, 0.99);
  EXPECT_LT(t.overhead_vs_none, 0.01);
  EXPECT_LT(t.steady.peak_bytes, c.peak_without_offload - c.activation_bytes_at_peak * 9 / 10);
}

TEST(PlannerPolicy, LearnsInTheFirstStepAndPlansTheRest) {
  const auto a = analyse_trace(synthesize(test::tiny_options(test::tiny_dense(), 3)));
  const auto profile = a.steps[0].resident_profile();
  const std::uint64_t budget = *std::max_element(profile.begin(), profile.end()) * 9 / 10;
  TierrtPolicy p;
  const auto run = replay(a.steps, p, ReplayOptions{budget, parse_link("pcie5"), false});
  EXPECT_EQ(run.steps[0].plan_alternative, -1);  // nothing learned yet: reactive
  EXPECT_GT(run.steps[0].pressure_spills, 0u);
  for (std::size_t i = 1; i < run.steps.size(); ++i) {
    EXPECT_EQ(run.steps[i].plan_ops, a.steps[i].ops.size());
    EXPECT_EQ(run.steps[i].pressure_spills, 0u);
    EXPECT_LE(run.steps[i].step_ns, run.steps[0].step_ns);
  }
  EXPECT_EQ(p.planner().mispredictions(), 0u);
}

// Measured launch times include stalls (the device waiting for a fetch), which
// only add: the planner keeps the shortest time seen for each launch of a shape,
// and a launch not measured (zero) does not count.
TEST(PlannerPolicy, KeepsTheShortestTimeSeenForEachLaunch) {
  const auto a = analyse_trace(synthesize(test::tiny_options(test::tiny_dense(), 3)));
  ASSERT_GE(a.steps.size(), 2u);
  StepTimeline slow = a.steps[0], fast = a.steps[1];
  ASSERT_EQ(slow.signature, fast.signature);
  ASSERT_GE(slow.ops.size(), 3u);
  for (auto& op : slow.ops) op.duration_ns *= 3;
  slow.ops[0].duration_ns = 0;  // not measured
  fast.ops[1].duration_ns *= 5;  // a stall this time
  PlannerPolicy p;
  SimResult none;
  none.late_ns.assign(slow.blocks.size(), 0);
  none.demanded.assign(slow.blocks.size(), 0);
  p.observe(slow, none);
  p.observe(fast, none);
  const StepTimeline* t = p.last_timeline();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ops[0].duration_ns, a.steps[1].ops[0].duration_ns);
  EXPECT_EQ(t->ops[1].duration_ns, a.steps[0].ops[1].duration_ns * 3);
  EXPECT_EQ(t->ops[2].duration_ns, a.steps[1].ops[2].duration_ns);
}

TEST(PlannerPolicy, EvalStepFallsBackAndTrainingResumesItsPlan) {
  auto o = test::tiny_options(test::tiny_dense(), 4);
  o.eval_after = 2;
  const auto a = analyse_trace(synthesize(o));
  ASSERT_EQ(a.steps.size(), 5u);
  const auto profile = a.steps[0].resident_profile();
  const std::uint64_t budget = *std::max_element(profile.begin(), profile.end()) * 9 / 10;
  TierrtPolicy p;
  const auto run = replay(a.steps, p, ReplayOptions{budget, parse_link("pcie5"), false});
  EXPECT_LT(run.steps[2].plan_ops, a.steps[2].ops.size()) << "followed the training plan into the eval step";
  for (std::size_t i : {1u, 3u, 4u}) EXPECT_EQ(run.steps[i].plan_ops, a.steps[i].ops.size()) << "step " << i;
  for (const auto& r : run.steps) EXPECT_EQ(r.over_budget_bytes, 0u);
  EXPECT_EQ(run.steps[4].pressure_spills, 0u);
}

TEST(PlannerPolicy, LatePrefetchesStartEarlierNextStep) {
  // The plan is made from a step whose backward pass is slow; the next steps run it
  // fast, so prefetches placed for the slow step arrive late. The feedback must
  // shrink the lateness from one step to the next.
  auto o = test::tiny_options(test::tiny_dense(), 4);
  const auto a = analyse_trace(synthesize(o));
  std::vector<StepTimeline> steps = a.steps;
  const std::uint32_t turn = turn_ops(steps[0]).front();
  for (std::size_t s = 1; s < steps.size(); ++s)
    for (std::uint32_t i = turn; i < steps[s].ops.size(); ++i) steps[s].ops[i].duration_ns /= 4;
  const auto profile = steps[0].resident_profile();
  const std::uint64_t budget = *std::max_element(profile.begin(), profile.end()) * 7 / 10;
  TierrtPolicy p;
  const auto link = parse_link("100,100");
  std::vector<double> late;
  for (std::size_t s = 0; s < steps.size(); ++s) {
    StepContext ctx{budget, link, &steps[s]};
    auto plans = p.plan_step(ctx);
    // The timeline the planner learns from is always the slow first step: only
    // feedback can correct the prefetch times.
    SimResult r = simulate_step(steps[s], plans, p, SimOptions{budget, link, false, {}});
    double total = 0;
    for (double x : r.late_ns) total += x;
    late.push_back(total);
    p.observe(steps[0], r);
  }
  ASSERT_GT(late[1], 0) << "the scenario does not make prefetches late";
  EXPECT_GT(p.planner().late_prefetches(), 0u);
  EXPECT_LT(late[3], late[1]);
}

TEST(Planner, MeasuredCopyRatesOverrideTheLinkModel) {
  // The same step, once with the runtime's measurement of a slow D2H copy engine:
  // the planner must plan against the measurement, not the nominal link.
  auto o = test::tiny_options(test::tiny_dense(), 2);
  o.step_markers = true;
  Trace fast = synthesize(o);
  Trace slow;
  for (const Event& e : fast) {
    slow.push_back(e);
    if (e.kind == EventKind::Step) slow.push_back(Event::copy_rate(CopyDir::DeviceToHost, 2'000'000'000));
  }
  const auto a_fast = analyse_trace(fast), a_slow = analyse_trace(slow);
  EXPECT_DOUBLE_EQ(a_slow.steps[1].measured_d2h_bps, 2e9);
  EXPECT_EQ(a_fast.steps[1].measured_d2h_bps, 0);
  const auto profile = a_fast.steps[1].resident_profile();
  const auto budget = *std::max_element(profile.begin(), profile.end()) * 7 / 10;
  const auto link = parse_link("pcie5");
  const auto r_fast = plan_step(a_fast.steps[1], budget, link, {});
  const auto r_slow = plan_step(a_slow.steps[1], budget, link, {});
  EXPECT_GT(r_slow.modeled.stall_ns, r_fast.modeled.stall_ns);
  // Replayed on the nominal link, the plan made for the slow engine is still valid.
  const auto check = simulate_step(a_fast.steps[1], std::span(&r_slow.plan, 1), *make_policy("tierrt"),
                                   SimOptions{budget, link, false, {}});
  EXPECT_EQ(check.over_budget_bytes, 0u);
}

TEST(Planner, TriggersAreOrderedAndKeyedByLaunch) {
  const auto a = analyse_trace(synthesize(test::tiny_options(test::tiny_dense(), 2)));
  const auto& tl = a.steps[1];
  const auto profile = tl.resident_profile();
  const auto budget = *std::max_element(profile.begin(), profile.end()) * 8 / 10;
  const auto r = plan_step(tl, budget, parse_link("pcie5"), {});
  ASSERT_FALSE(r.spilled.empty());
  const auto& table = r.plan.triggers;
  EXPECT_EQ(table.op_count(), tl.ops.size());
  std::size_t seen = 0, refetches = 0;
  for (std::uint32_t op = 0; op < table.op_count(); ++op)
    for (const Trigger& t : table.at(op)) {
      EXPECT_EQ(t.op, op);
      ++seen;
      refetches += t.action == Action::Refetch;
      const auto& b = tl.blocks[tl.by_ordinal[t.ordinal]];
      EXPECT_EQ(b.cls, LifetimeClass::Activation);
      if (t.action == Action::Spill) {
        EXPECT_GE(t.op, tl.uses_of(tl.by_ordinal[t.ordinal]).front());
      }
    }
  EXPECT_EQ(seen, table.all().size());
  // One spill and one prefetch each, and a Refetch for activations kept
  // (should the rescue spill one).
  EXPECT_EQ(seen - refetches, 2 * r.spilled.size());
  EXPECT_TRUE(table.at(table.op_count()).empty());
  EXPECT_EQ(r.plan.expected_tokens, tl.tokens);
}

// XLA puts a step's buffers into one temporary allocation freed at the step's
// end: a buffer read for the last time stays allocated, idle, holding memory
// the backward pass needs for its prefetches. The planner spills it after
// its last reader and never brings it back.
TEST(Planner, ABufferPastItsLastReaderMakesRoomForAPrefetch) {
  constexpr std::uint64_t kBytes = 100'000'000, kLaunchNs = 10'000'000;
  constexpr BlockId a = 0x1000, b = 0x2000, c = 0x3000;
  // Launches 0..7: A, B and C each allocated and written; backward: C read
  // back at once (no gap: no round trip), B read, A read; all three freed
  // after the last, together.
  const std::vector<std::vector<BlockId>> uses = {{a}, {b}, {c}, {c}, {}, {b}, {}, {a}};
  Trace trace;
  LaunchSeq seq = 0;
  for (std::uint64_t step = 0; step < 3; ++step) {
    trace.push_back(Event::step(step));
    for (std::size_t op = 0; op < uses.size(); ++op) {
      const auto& named = uses[op];
      if (op < 3) trace.push_back(Event::alloc(named.front(), kBytes));  // just before its writer
      if (op == 0) trace.push_back(Event::phase(Phase::Forward));
      if (op == 3) trace.push_back(Event::phase(Phase::Backward));
      trace.push_back(Event::launch(seq, kLaunchNs));
      for (BlockId x : named) trace.push_back(Event::use(x, seq));
      ++seq;
    }
    for (BlockId x : {a, b, c}) trace.push_back(Event::free(x));
  }
  trace.push_back(Event::step(3));
  const auto analysed = analyse_trace(trace);
  ASSERT_GE(analysed.steps.size(), 2u);
  const StepTimeline& tl = analysed.steps[1];
  const std::uint32_t c_index = tl.by_ordinal[2];
  ASSERT_EQ(tl.blocks[c_index].id, c);
  // Two of the three fit: A must be off from after launch 0 until launch 7,
  // and at launch 7 one of B and C must have left as well.
  const auto r = plan_step(tl, 2 * kBytes, parse_link("pcie5"), {});
  EXPECT_EQ(r.modeled.over_budget_bytes, 0u);
  EXPECT_EQ(r.modeled.demand_fetches, 0u) << "A's prefetch found room";
  bool c_spilled_after_its_reader = false;
  for (const Trigger& t : r.plan.triggers.all()) {
    if (t.ordinal != tl.blocks[c_index].ordinal) continue;
    EXPECT_EQ(t.action, Action::Spill) << "C is never fetched back: it is freed unused";
    c_spilled_after_its_reader |= t.action == Action::Spill && t.op == 3;
  }
  EXPECT_TRUE(c_spilled_after_its_reader);
}

// A granule group's members hold no memory until the group is first named;
// those the device has no room for then start on the host (XLA's temporary
// allocation is larger than the budget). The plan brings each back ahead of
// its first use (a Refetch, which moves nothing where the member is on the
// device), rather than leaving the use to fetch it on demand.
TEST(Planner, AGranuleMemberStartedOnTheHostComesBackBeforeItsFirstUse) {
  constexpr std::uint64_t kBytes = 100'000'000, kLaunchNs = 10'000'000;
  constexpr BlockId m0 = 0x1000, m1 = 0x2000, m2 = 0x3000;
  // One group of three members, allocated together before launch 0; launches
  // 0..2 name the first, 3..4 the second, 5 the third.
  const std::vector<std::vector<BlockId>> uses = {{m0}, {m0}, {m0}, {m1}, {m1}, {m2}};
  Trace trace;
  LaunchSeq seq = 0;
  for (std::uint64_t step = 0; step < 3; ++step) {
    trace.push_back(Event::step(step));
    for (BlockId x : {m0, m1, m2}) trace.push_back(Event::alloc(x, kBytes, 0, /*lazy=*/true));
    for (const auto& named : uses) {
      trace.push_back(Event::launch(seq, kLaunchNs));
      for (BlockId x : named) trace.push_back(Event::use(x, seq));
      ++seq;
    }
    for (BlockId x : {m0, m1, m2}) trace.push_back(Event::free(x));
  }
  trace.push_back(Event::step(3));
  const auto analysed = analyse_trace(trace);
  ASSERT_GE(analysed.steps.size(), 2u);
  const StepTimeline& tl = analysed.steps[1];
  // Room for two members: the third starts on the host, and the first,
  // read for the last time at launch 2, can leave to make room for it.
  const std::uint64_t budget = 2 * kBytes;
  const LinkModel link = parse_link("pcie5");
  const auto r = plan_step(tl, budget, link, {});
  std::map<std::uint32_t, std::uint32_t> refetch_at;  // ordinal -> launch
  for (const Trigger& t : r.plan.triggers.all())
    if (t.action == Action::Refetch) refetch_at[t.ordinal] = t.op;
  for (BlockId x : {m2}) {
    std::uint32_t b = 0;
    while (tl.blocks[b].id != x) ++b;
    const std::uint32_t first_use = tl.block_uses[tl.blocks[b].uses_begin];
    ASSERT_TRUE(refetch_at.count(tl.blocks[b].ordinal)) << "member 0x" << std::hex << x;
    EXPECT_LT(refetch_at[tl.blocks[b].ordinal], first_use) << "issued before the launch that needs it";
  }
  // In the step model the first use finds its member already coming back:
  // no fetch on demand (whether it waits depends on when the budget has room).
  StepPlan without = r.plan;
  std::vector<Trigger> kept;
  for (const Trigger& t : r.plan.triggers.all())
    if (t.action != Action::Refetch) kept.push_back(t);
  without.triggers = TriggerTable(std::move(kept), static_cast<std::uint32_t>(tl.ops.size()));
  SafeReactive victims;
  const SimOptions sim{budget, link, false, {}};
  const SimResult with_refetch = simulate_step(tl, std::span(&r.plan, 1), victims, sim);
  const SimResult no_refetch = simulate_step(tl, std::span(&without, 1), victims, sim);
  EXPECT_EQ(with_refetch.demand_fetches, 0u);
  EXPECT_GT(no_refetch.demand_fetches, 0u);
}

// The application allocates ahead of the device, so the allocator's rescue
// may spill an activation the plan keeps (a spill of the plan's still in
// flight holds the memory the model had freed). Each activation the plan
// keeps gets a Refetch before the use after its idle gap: in the step
// model, which never spills them, the plan is the same with or without.
TEST(Planner, AnActivationThePlanKeepsComesBackBeforeItsNextUseShouldTheRescueSpillIt) {
  constexpr std::uint64_t kBytes = 100'000'000, kLaunchNs = 10'000'000;
  constexpr std::uint32_t kLayers = 4;
  Trace trace;
  LaunchSeq seq = 0;
  for (std::uint64_t step = 0; step < 3; ++step) {
    trace.push_back(Event::step(step));
    for (std::uint32_t l = 0; l < kLayers; ++l) {  // forward: layer l writes its activation
      trace.push_back(Event::alloc(0x1000 * (l + 1), kBytes, 0));
      trace.push_back(Event::launch(seq, kLaunchNs));
      trace.push_back(Event::use(0x1000 * (l + 1), seq++));
    }
    for (std::uint32_t l = kLayers; l-- > 0;) {  // backward: reads it, frees it
      trace.push_back(Event::launch(seq, kLaunchNs));
      trace.push_back(Event::use(0x1000 * (l + 1), seq++));
      trace.push_back(Event::free(0x1000 * (l + 1)));
    }
  }
  trace.push_back(Event::step(3));
  const auto analysed = analyse_trace(trace);
  ASSERT_GE(analysed.steps.size(), 2u);
  const StepTimeline& tl = analysed.steps[1];
  const std::uint64_t budget = 3 * kBytes;  // one activation must leave over the peak
  const LinkModel link = parse_link("pcie5");
  const auto r = plan_step(tl, budget, link, {});
  std::set<std::uint32_t> spilled(r.spilled.begin(), r.spilled.end());
  ASSERT_FALSE(spilled.empty());
  std::map<std::uint32_t, std::uint32_t> refetch_at;  // ordinal -> launch
  for (const Trigger& t : r.plan.triggers.all())
    if (t.action == Action::Refetch) refetch_at[t.ordinal] = t.op;
  std::uint32_t kept = 0;
  for (std::uint32_t b = 0; b < tl.blocks.size(); ++b) {
    const BlockRecord& rec = tl.blocks[b];
    const auto uses = tl.uses_of(b);
    if (spilled.count(b) || uses.size() < 2) continue;  // the last layer's is read right after it is written
    if (uses[1] <= uses[0] + 1) continue;
    ++kept;
    ASSERT_TRUE(refetch_at.count(rec.ordinal)) << "activation " << b;
    EXPECT_LT(refetch_at[rec.ordinal], uses[1]) << "issued before the launch that reads it back";
    EXPECT_GT(refetch_at[rec.ordinal], uses[0]) << "not before its last forward use";
  }
  EXPECT_GT(kept, 0u);
  StepPlan without = r.plan;
  std::vector<Trigger> others;
  for (const Trigger& t : r.plan.triggers.all())
    if (t.action != Action::Refetch) others.push_back(t);
  without.triggers = TriggerTable(std::move(others), static_cast<std::uint32_t>(tl.ops.size()));
  SafeReactive victims;
  const SimOptions sim{budget, link, false, {}};
  const SimResult with = simulate_step(tl, std::span(&r.plan, 1), victims, sim);
  const SimResult plain = simulate_step(tl, std::span(&without, 1), victims, sim);
  EXPECT_EQ(with.step_ns, plain.step_ns);
  EXPECT_EQ(with.demand_fetches, plain.demand_fetches);
  EXPECT_EQ(with.bytes_h2d, plain.bytes_h2d);
}

// A pool allocated once, before the steps (a caching allocator's segment,
// tiered per granule): its granules hold the step's activations, but no step
// allocates them, so they have no ordinal. The plan names them by id, spills
// each after its forward use and after its last use (to the step's end: the
// pool is never freed), and brings each back before its next use, so that
// the step runs in the budget with no fetch on demand.
TEST(Planner, APoolsGranulesFromBeforeTheStepArePlannedByTheirIds) {
  constexpr std::uint32_t kGranules = 6;
  constexpr std::uint64_t kBytes = 100'000'000, kLaunchNs = 10'000'000;
  const auto analysed = analyse_trace(test::pool_trace(kGranules, kBytes, kLaunchNs, 3));
  ASSERT_GE(analysed.steps.size(), 2u);
  const StepTimeline& tl = analysed.steps[1];
  const std::uint64_t budget = 3 * kBytes;  // half the pool
  const LinkModel link = parse_link("pcie5");
  const auto r = plan_step(tl, budget, link, {});
  std::set<std::uint64_t> spilled, fetched;
  for (const Trigger& t : r.plan.triggers.all()) {
    ASSERT_NE(t.block, 0u) << "no block of this step is allocated in it";
    const std::uint32_t b = tl.block_named(t.ordinal);
    ASSERT_NE(b, kNever);
    EXPECT_EQ(tl.blocks[b].id, t.block);
    if (t.action == Action::Spill) spilled.insert(t.block);
    if (t.action == Action::Prefetch) fetched.insert(t.block);
  }
  EXPECT_GE(spilled.size(), kGranules / 2);
  EXPECT_FALSE(fetched.empty());
  EXPECT_EQ(r.modeled.over_budget_bytes, 0u);
  EXPECT_EQ(r.modeled.demand_fetches, 0u);
  // Without a plan the reactive path alone fetches on demand and stalls.
  const StepPlan none{tl.tokens, TriggerTable({}, static_cast<std::uint32_t>(tl.ops.size())), tl.token_ordinals};
  SafeReactive victims;
  const SimResult reactive = simulate_step(tl, std::span(&none, 1), victims, SimOptions{budget, link, false, {}});
  EXPECT_GT(reactive.demand_fetches, 0u);
  EXPECT_LT(r.modeled.stall_ns, reactive.stall_ns);
}

}  // namespace
}  // namespace tierrt::policy
