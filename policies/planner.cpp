#include "policies/planner.hpp"

#include <algorithm>

#include "policies/excess_tracker.hpp"
#include "policies/idle_gap.hpp"

namespace tierrt::policy {
namespace {

struct Candidate {
  std::uint32_t block = 0;
  IdleGap gap;
  double bytes = 0;
  bool hides = false;  // the idle gap is longer than the round trip
  bool chosen = false;
};

// Records where the plan ran short of memory, and still lets the model go on with
// the safe reactive choice.
class PressureLog : public VictimChooser {
 public:
  void choose(const VictimQuery& q, std::vector<std::uint32_t>& out) override {
    events.emplace_back(q.op, static_cast<double>(q.bytes_needed));
    fallback_.choose(q, out);
  }
  std::vector<std::pair<std::uint32_t, double>> events;

 private:
  SafeReactive fallback_;
};

TriggerTable make_triggers(const StepTimeline& tl, const std::vector<Candidate>& cands, const std::vector<double>& start,
                           const LinkModel& link, const PrefetchLeads& leads) {
  std::vector<const Candidate*> chosen;
  for (const auto& c : cands)
    if (c.chosen) chosen.push_back(&c);
  std::vector<Trigger> t;
  t.reserve(chosen.size() * 2);
  for (const Candidate* c : chosen)
    t.push_back({c->gap.last_before, Action::Spill, tl.blocks[c->block].ordinal, c->gap.last_before});
  // One H2D queue serves prefetches in order of next use: walk back from the last
  // deadline so each copy starts as late as it can and still leaves room for the next.
  std::sort(chosen.begin(), chosen.end(), [](const Candidate* a, const Candidate* b) {
    return a->gap.first_after != b->gap.first_after ? a->gap.first_after < b->gap.first_after
                                                    : a->gap.last_before > b->gap.last_before;
  });
  std::vector<std::uint32_t> trigger_op(chosen.size());
  double next_start = std::numeric_limits<double>::infinity();
  for (std::size_t k = chosen.size(); k-- > 0;) {
    const Candidate& c = *chosen[k];
    const double deadline = start[c.gap.first_after] - leads.at(tl.blocks[c.block].ordinal);
    const double begin = std::min(deadline, next_start) - link.h2d_ns(c.bytes);
    next_start = begin;
    // The last launch issued no later than `begin`, but never before the spill's launch.
    auto it = std::upper_bound(start.begin(), start.end() - 1, begin);
    std::uint32_t op = it == start.begin() ? 0 : static_cast<std::uint32_t>(it - start.begin() - 1);
    trigger_op[k] = std::clamp(op, c.gap.last_before + 1, c.gap.first_after);
  }
  for (std::size_t k = 0; k < chosen.size(); ++k)
    t.push_back({trigger_op[k], Action::Prefetch, tl.blocks[chosen[k]->block].ordinal, 0});
  return TriggerTable(std::move(t), static_cast<std::uint32_t>(tl.ops.size()));
}

bool better(const SimResult& a, const SimResult& b) {
  if ((a.over_budget_bytes == 0) != (b.over_budget_bytes == 0)) return a.over_budget_bytes == 0;
  if (a.step_ns != b.step_ns) return a.step_ns < b.step_ns;
  return a.bytes_d2h < b.bytes_d2h;
}

}  // namespace

void PrefetchLeads::add(std::uint32_t ordinal, double more) {
  if (ordinal >= ns.size()) ns.resize(ordinal + 1, 0);
  ns[ordinal] += more;
}

PlanResult plan_step(const StepTimeline& tl, std::uint64_t budget, LinkModel link, const PrefetchLeads& leads,
                     const PlannerOptions& options) {
  if (tl.measured_d2h_bps > 0) link.d2h_bytes_per_s = tl.measured_d2h_bps;
  if (tl.measured_h2d_bps > 0) link.h2d_bytes_per_s = tl.measured_h2d_bps;
  const auto start = ideal_start_times(tl);

  std::vector<Candidate> cands;
  for (std::uint32_t b = 0; b < tl.blocks.size(); ++b) {
    const BlockRecord& r = tl.blocks[b];
    if (r.cls != LifetimeClass::Activation || r.predates_step()) continue;
    auto gap = longest_gap(tl, b, start);
    if (!gap || gap->first_after <= gap->last_before + 1) continue;  // no launch runs while it would be away
    const double bytes = static_cast<double>(r.bytes);
    cands.push_back({b, *gap, bytes, gap->ns >= link.d2h_ns(bytes) + link.h2d_ns(bytes), false});
  }
  // Earliest-written first: they leave first and come back last, so their time off
  // the device covers the peak, and the D2H queue starts working as early as it can.
  std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    return a.gap.last_before != b.gap.last_before ? a.gap.last_before < b.gap.last_before : a.bytes > b.bytes;
  });

  ExcessTracker tracker = ExcessTracker::over_budget(tl.resident_profile(), budget);

  auto choose_more = [&]() {
    for (int pass = 0; pass < 2; ++pass) {  // blocks whose round trip hides first
      for (Candidate& c : cands) {
        if (!options.spill_all && tracker.max_overall() <= 0) return;
        if (c.chosen || (pass == 0 && !c.hides && !options.spill_all)) continue;
        const std::uint32_t off_begin = c.gap.last_before + 1, off_end = c.gap.first_after;
        if (!options.spill_all && tracker.max_over(off_begin, off_end) <= 0) continue;
        c.chosen = true;
        tracker.relieve(off_begin, off_end, c.bytes);
      }
    }
  };
  choose_more();

  PrefetchLeads local = leads;
  PlanResult best;
  bool have_best = false;
  const SimOptions sim{budget, link, false, {}};
  for (std::uint32_t round = 1; round <= std::max(1u, options.max_rounds); ++round) {
    StepPlan plan{tl.tokens, make_triggers(tl, cands, start, link, local), tl.token_ordinals};
    PressureLog log;
    SimResult r = simulate_step(tl, std::span(&plan, 1), log, sim);
    const bool improved = !have_best || better(r, best.modeled);
    if (improved) {
      best.plan = std::move(plan);
      best.modeled = r;
      best.rounds = round;
      have_best = true;
    }
    bool changed = false;
    // Where memory ran short, more must be off: raise the requirement there and choose again.
    for (auto [op, bytes] : log.events) {
      if (op >= tl.ops.size()) continue;
      tracker.relieve(op, op + 1, -bytes);
      changed = true;
    }
    if (changed) choose_more();
    // A prefetch that arrived late starts earlier by as much as it was late.
    for (std::uint32_t b = 0; b < tl.blocks.size(); ++b)
      if (r.late_ns[b] > 0 && !tl.blocks[b].predates_step()) {
        local.add(tl.blocks[b].ordinal, r.late_ns[b]);
        changed = true;
      }
    if (!changed) break;
  }
  for (const Candidate& c : cands)
    if (c.chosen) best.spilled.push_back(c.block);
  return best;
}

}  // namespace tierrt::policy
