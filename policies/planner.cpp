#include "policies/planner.hpp"

#include <algorithm>
#include <array>

#include "policies/excess_tracker.hpp"
#include "policies/idle_gap.hpp"
#include "policies/link_schedule.hpp"

namespace tierrt::policy {
namespace {

struct Candidate {
  std::uint32_t block = 0;
  IdleGap gap;
  double bytes = 0;
  bool hides = false;        // the idle gap is longer than the round trip
  bool covers_peak = false;  // off at the launch most over budget, where its bytes count most
  bool chosen = false;
  bool refused = false;  // the link could not carry its spill before the block was needed back
  std::uint32_t out_by = 0;  // the first launch issued after its spill ended, in the plan tried last
  // After its last use, until its free later in the step: spilled, never
  // fetched back (gap.first_after is the first launch after the free). A
  // buffer that outlives its last reader (XLA's temporaries of a step,
  // freed whole at its end) holds memory a prefetch needs.
  bool tail = false;
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

// A trigger naming block `b` of `tl`: by its ordinal, or (a block from
// before the step) by its index and its id.
Trigger trigger_for(const StepTimeline& tl, std::uint32_t b, std::uint32_t op, Action action,
                    std::uint32_t release_after) {
  const BlockRecord& r = tl.blocks[b];
  return {op, action, tl.name_of(b), release_after, r.predates_step() ? r.id : 0};
}

// A Refetch for each block, each placed as its prefetch would be: the H2D
// engine serves them in order of the use they come back for.
std::vector<Trigger> refetches(const StepTimeline& tl, std::vector<SpilledBlock> blocks,
                               const std::vector<double>& start, const LinkModel& link, const PrefetchLeads& leads,
                               std::uint64_t budget) {
  std::stable_sort(blocks.begin(), blocks.end(), [](const SpilledBlock& a, const SpilledBlock& b) {
    return a.gap.first_after < b.gap.first_after;
  });
  const auto at = place_prefetches(tl, blocks, start, link, leads, budget, MemoryFloor::None);
  std::vector<Trigger> t;
  t.reserve(blocks.size());
  for (std::size_t k = 0; k < blocks.size(); ++k)
    t.push_back(trigger_for(tl, blocks[k].block, at[k], Action::Refetch, 0));
  return t;
}

// A granule-group member allocated in the step holds no memory until its
// group is first named, and starts on the host where the device has no room
// then (XLA's temporary allocation is larger than the budget); a pool's
// granule from before the step may be where the step before left it, on the
// host. Its first use would fetch it on demand, with its stream waiting. A
// Refetch brings it back ahead of that use, placed as a prefetch would be.
std::vector<Trigger> first_use_refetches(const StepTimeline& tl, const std::vector<double>& start,
                                         const LinkModel& link, const PrefetchLeads& leads, std::uint64_t budget) {
  std::vector<SpilledBlock> lazy;
  for (std::uint32_t b = 0; b < tl.blocks.size(); ++b) {
    const BlockRecord& r = tl.blocks[b];
    if (!r.lazy || r.use_count() == 0) continue;
    const std::uint32_t first = tl.block_uses[r.uses_begin];
    if (first <= r.alloc_op + 1) continue;  // no launch in between to bring it back at
    lazy.push_back({b, static_cast<double>(r.bytes), IdleGap{r.alloc_op, first, start[first] - start[r.alloc_op]}, 0});
  }
  return refetches(tl, std::move(lazy), start, link, leads, budget);
}

// The plan is made on the device's timeline, but the application allocates
// on the host's, ahead of the device: an allocation may find memory the
// model had freed still held by a spill in flight, and the allocator's
// rescue then spills the coldest idle block, one the plan keeps. Without a
// trigger of the plan's, that block's next use would fetch it on demand. A
// Refetch for each candidate the plan keeps, placed as its prefetch would
// be, brings it back ahead of that use if it is away then, and does
// nothing otherwise (the step model never spills it: the modeled plan is
// unchanged).
std::vector<Trigger> unplanned_spill_refetches(const StepTimeline& tl, const std::vector<Candidate>& cands,
                                               const std::vector<double>& start, const LinkModel& link,
                                               const PrefetchLeads& leads, std::uint64_t budget) {
  std::vector<SpilledBlock> kept;
  for (const Candidate& c : cands)
    if (!c.chosen && !c.tail && c.gap.first_after < tl.ops.size())
      kept.push_back({c.block, c.bytes, c.gap, 0});
  return refetches(tl, std::move(kept), start, link, leads, budget);
}

TriggerTable make_triggers(const StepTimeline& tl, const std::vector<Candidate>& cands, const std::vector<double>& start,
                           const LinkModel& link, const PrefetchLeads& leads, std::uint64_t budget, MemoryFloor floor) {
  std::vector<const Candidate*> chosen;
  for (const auto& c : cands)
    if (c.chosen) chosen.push_back(&c);
  std::vector<Trigger> t;
  t.reserve(chosen.size() * 2);
  for (const Candidate* c : chosen)
    t.push_back(trigger_for(tl, c->block, c->gap.last_before, Action::Spill, c->gap.last_before));
  std::erase_if(chosen, [](const Candidate* c) { return c->tail; });  // never fetched back
  // The H2D engine serves prefetches in order of next use.
  std::sort(chosen.begin(), chosen.end(), [](const Candidate* a, const Candidate* b) {
    return a->gap.first_after != b->gap.first_after ? a->gap.first_after < b->gap.first_after
                                                    : a->gap.last_before > b->gap.last_before;
  });
  std::vector<SpilledBlock> spilled;
  spilled.reserve(chosen.size());
  for (const Candidate* c : chosen) spilled.push_back({c->block, c->bytes, c->gap, c->out_by});
  const auto at = place_prefetches(tl, spilled, start, link, leads, budget, floor);
  for (std::size_t k = 0; k < spilled.size(); ++k)
    t.push_back(trigger_for(tl, spilled[k].block, at[k], Action::Prefetch, 0));
  for (const Trigger& r : first_use_refetches(tl, start, link, leads, budget)) t.push_back(r);
  for (const Trigger& r : unplanned_spill_refetches(tl, cands, start, link, leads, budget)) t.push_back(r);
  return TriggerTable(std::move(t), static_cast<std::uint32_t>(tl.ops.size()));
}

// Budget held first; then the least stall, which is what the lower bound measures;
// then the least traffic.
bool better(const SimResult& a, const SimResult& b) {
  if ((a.over_budget_bytes == 0) != (b.over_budget_bytes == 0)) return a.over_budget_bytes == 0;
  if (a.step_ns != b.step_ns) return a.step_ns < b.step_ns;
  return a.bytes_d2h < b.bytes_d2h;
}

// Within budget without a stall: nothing can do better (the other floors move the same blocks).
bool optimal(const SimResult& r) { return r.over_budget_bytes == 0 && r.stall_ns <= 0; }

// One plan tried in the step model, with its copies placed on the timeline it got.
struct Trial {
  StepPlan plan;
  SimResult modeled;
  LinkSchedule copies;
  std::vector<std::pair<std::uint32_t, double>> pressure;  // (launch, bytes short)
};

constexpr std::array kFloors{MemoryFloor::None, MemoryFloor::WhereCoverable, MemoryFloor::Strict};
// Rounds without a better plan after which corrections stop.
constexpr std::uint32_t kPatience = 3;
// Rounds in which every memory floor is tried.
constexpr std::uint32_t kAllFloorRounds = 2;
// Rounds beyond max_rounds that only drop spills, when no plan tried so far fits the link.
constexpr std::uint32_t kFittingRounds = 8;

}  // namespace

PlanResult plan_step(const StepTimeline& tl, std::uint64_t budget, LinkModel link, const PrefetchLeads& leads,
                     const PlannerOptions& options) {
  if (tl.measured_d2h_bps > 0) link.d2h_bytes_per_s = tl.measured_d2h_bps;
  if (tl.measured_h2d_bps > 0) link.h2d_bytes_per_s = tl.measured_h2d_bps;
  const auto start = ideal_start_times(tl);
  const auto profile = tl.resident_profile();
  const auto peak = static_cast<std::uint32_t>(std::max_element(profile.begin(), profile.end()) - profile.begin());

  std::vector<Candidate> cands;
  std::vector<std::uint32_t> candidate_of(tl.blocks.size(), kNever);
  for (std::uint32_t b = 0; b < tl.blocks.size(); ++b) {
    const BlockRecord& r = tl.blocks[b];
    // Activations the step allocates; and a pool's granules from before the
    // step (a caching allocator's segment, allocated once), which hold the
    // step's activations among whatever else the framework carves there.
    const bool pool_granule = r.predates_step() && r.lazy;
    if (!pool_granule && (r.cls != LifetimeClass::Activation || r.predates_step())) continue;
    const double bytes = static_cast<double>(r.bytes);
    // Away while no launch names it: between two uses (no launch runs while
    // it would be away: not a gap), and after the last one until a free
    // within the step.
    if (auto gap = longest_gap(tl, b, start); gap && gap->first_after > gap->last_before + 1) {
      const bool hides = gap->ns >= link.d2h_ns(bytes) + link.h2d_ns(bytes);
      const bool covers_peak = gap->last_before < peak && peak < gap->first_after;
      cands.push_back({b, *gap, bytes, hides, covers_peak, false, false, 0, false});
    }
    // A pool's granule is never freed: its tail runs to the step's end (the
    // next step brings it back for its first use there: a Refetch).
    const std::uint32_t tail_end =
        pool_granule ? static_cast<std::uint32_t>(tl.ops.size()) : (r.free_op != kNever ? r.free_op : kNever);
    if (const auto uses = tl.uses_of(b);
        !uses.empty() && tail_end != kNever && tail_end <= tl.ops.size() && tail_end > uses.back() + 1) {
      const IdleGap tail{uses.back(), tail_end, start[tail_end] - start[uses.back() + 1]};
      const bool covers_peak = tail.last_before < peak && peak < tail.first_after;
      cands.push_back({b, tail, bytes, tail.ns >= link.d2h_ns(bytes), covers_peak, false, false, 0, true});
    }
  }
  // Most bytes saved at the peak per byte moved first: every block off over the
  // peak saves its whole size there for one round trip, any other saves nothing
  // there. Among those, earliest written first: they leave first and come back
  // last, and the D2H engine starts working as early as it can.
  std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    if (a.covers_peak != b.covers_peak) return a.covers_peak;
    return a.gap.last_before != b.gap.last_before ? a.gap.last_before < b.gap.last_before : a.bytes > b.bytes;
  });
  for (std::uint32_t k = 0; k < cands.size(); ++k)
    if (!cands[k].tail) candidate_of[cands[k].block] = k;

  ExcessTracker tracker = ExcessTracker::over_budget(profile, budget);
  auto choose_more = [&](auto&& link_carries) {
    for (int pass = 0; pass < 2; ++pass) {  // blocks whose round trip hides first
      for (Candidate& c : cands) {
        if (!options.spill_all && tracker.max_overall() <= 0) return;
        if (c.chosen || c.refused || (pass == 0 && !c.hides && !options.spill_all)) continue;
        const std::uint32_t off_begin = c.gap.last_before + 1, off_end = c.gap.first_after;
        if (!options.spill_all && tracker.max_over(off_begin, off_end) <= 0) continue;
        if (!link_carries(c)) continue;
        c.chosen = true;
        tracker.relieve(off_begin, off_end, c.bytes);
      }
    }
  };
  choose_more([](const Candidate&) { return true; });

  PrefetchLeads local = leads;
  PlanResult best;
  bool have_best = false;
  const SimOptions sim{budget, link, false, {}};
  const std::uint32_t rounds = std::max(1u, options.max_rounds);
  MemoryFloor corrected_floor = kFloors.front();
  std::vector<Trigger> last_triggers;
  for (std::uint32_t round = 1; round <= rounds + kFittingRounds; ++round) {
    const bool only_drop = round > rounds;
    if (only_drop && have_best) break;
    // Each memory floor for the prefetches, checked in the step model, in the first
    // rounds (the first corrections change every floor's plan); afterwards the
    // corrections are for the floor that did best, until they change nothing.
    Trial tried;
    bool have_tried = false, repeated = false;
    for (MemoryFloor floor : kFloors) {
      if (round > kAllFloorRounds && floor != corrected_floor) continue;
      Trial t{{tl.tokens, make_triggers(tl, cands, start, link, local, budget, floor), tl.token_ordinals}, {}, {}, {}};
      if (round > kAllFloorRounds && t.plan.triggers.all() == last_triggers) {
        repeated = true;
        break;
      }
      PressureLog log;
      t.modeled = simulate_step(tl, std::span(&t.plan, 1), log, sim);
      t.pressure = std::move(log.events);
      t.copies = schedule_copies(tl, t.plan.triggers, t.modeled.launch_start_ns, link);
      // Only plans whose every copy fits its window on the timeline they got.
      if (t.copies.fits() && (!have_best || better(t.modeled, best.modeled))) {
        best.plan = t.plan;
        best.modeled = t.modeled;
        best.rounds = round;
        best.spilled.clear();
        for (const Candidate& c : cands)
          if (c.chosen) best.spilled.push_back(c.block);
        have_best = true;
      }
      if (!have_tried || better(t.modeled, tried.modeled)) {
        tried = std::move(t);
        have_tried = true;
        corrected_floor = floor;
      }
      if (have_best && optimal(best.modeled)) return best;
    }
    // Corrections that stopped paying: the plan no longer changes, or no longer improves.
    if (repeated || (have_best && best.rounds + kPatience <= round)) break;
    last_triggers = tried.plan.triggers.all();

    // Where the link had carried each spill, on the timeline the plan got: its
    // prefetch goes no earlier next time.
    // (A block's first spill in the queue is its gap's; a tail's comes later.)
    std::vector<bool> seen(tl.blocks.size(), false);
    for (const ScheduledCopy& copy : tried.copies.d2h) {
      const std::uint32_t b = tl.block_named(copy.ordinal);
      if (b == kNever || seen[b]) continue;
      seen[b] = true;
      const std::uint32_t k = candidate_of[b];
      if (k != kNever) cands[k].out_by = first_issued_at_or_after(tl, tried.modeled.launch_start_ns, copy.end_ns);
    }
    bool changed = false;
    // A spill still under way when its block is needed back took the link's time
    // for nothing: drop it, for good.
    auto misfits = tried.copies.late_spills();
    if (only_drop)  // a plan that must fit at last: a block whose prefetch missed its use goes too
      for (std::uint32_t ordinal : tried.copies.late_fetches()) misfits.push_back(ordinal);
    for (std::uint32_t ordinal : misfits) {
      const std::uint32_t b = tl.block_named(ordinal);
      const std::uint32_t k = b != kNever ? candidate_of[b] : kNever;
      if (k == kNever || !cands[k].chosen) continue;
      Candidate& c = cands[k];
      if (!only_drop && c.out_by < c.gap.first_after) continue;  // a later prefetch gives the spill the time it needs
      c.chosen = false;
      c.refused = true;
      tracker.relieve(c.gap.last_before + 1, c.gap.first_after, -c.bytes);
      changed = true;
    }
    if (only_drop) continue;
    // Where memory ran short, more must be off: raise the requirement there and
    // choose again, only blocks whose spill the link carries, behind the spills
    // already queued, before the block is needed off.
    for (auto [op, bytes] : tried.pressure) {
      if (op >= tl.ops.size()) continue;
      tracker.relieve(op, op + 1, -bytes);
      changed = true;
    }
    if (changed) {
      const auto& t = tried.modeled.launch_start_ns;
      choose_more([&](const Candidate& c) {
        const double ready = t[c.gap.last_before] + static_cast<double>(tl.ops[c.gap.last_before].duration_ns);
        const std::uint32_t needed_off_by = c.covers_peak ? peak : c.gap.first_after - 1;
        return tried.copies.spill_end_if_queued(ready, c.bytes, link) <= t[needed_off_by];
      });
    }
    // A prefetch that arrived late starts earlier by as much as it was late.
    for (std::uint32_t b = 0; b < tl.blocks.size(); ++b)
      if (tried.modeled.late_ns[b] > 0 && !tl.blocks[b].predates_step()) {
        local.add(tl.blocks[b].ordinal, tried.modeled.late_ns[b]);
        changed = true;
      }
    if (!changed) {
      if (have_best) break;
      round = std::max(round, rounds);  // nothing left to correct: only dropping can make a plan fit
    }
  }
  if (!have_best) {
    // Nothing the link carries: plan no spill and leave the budget to the
    // reactive path (only what starts off the device comes back by the plan).
    best = PlanResult{};
    best.plan = StepPlan{tl.tokens,
                         TriggerTable(first_use_refetches(tl, start, link, local, budget),
                                      static_cast<std::uint32_t>(tl.ops.size())),
                         tl.token_ordinals};
    PressureLog log;
    best.modeled = simulate_step(tl, std::span(&best.plan, 1), log, sim);
  }
  return best;
}

}  // namespace tierrt::policy
