#include "baseline_policies.hpp"

#include <algorithm>

#include "layer_groups.hpp"
#include "policies/excess_tracker.hpp"

namespace tierrt::policy {
namespace {

StepPlan framework_plan(std::vector<Trigger> triggers, const StepTimeline& tl) {
  return StepPlan{{}, TriggerTable(std::move(triggers), static_cast<std::uint32_t>(tl.ops.size()))};
}

bool is_projection_output(Role r) {
  switch (r) {
    case Role::Query:
    case Role::Key:
    case Role::Value:
    case Role::AttentionOutput:
    case Role::MlpUp:
    case Role::MlpGate:
    case Role::ExpertActivation:
      return true;
    default:
      return false;
  }
}

}  // namespace

void ReactiveLruPolicy::choose(const VictimQuery& q, std::vector<std::uint32_t>& out) {
  std::vector<VictimCandidate> c(q.candidates.begin(), q.candidates.end());
  std::sort(c.begin(), c.end(), [](auto& a, auto& b) { return a.last_use_ns < b.last_use_ns; });
  for (const auto& v : c) out.push_back(v.block);
}

std::vector<StepPlan> VdnnPolicy::plan_step(const StepContext& ctx) {
  const StepTimeline& tl = *ctx.framework_view;
  const auto groups = layer_groups(tl);
  std::vector<Trigger> t;
  for (const LayerGroup& g : groups) {
    for (std::size_t k = 0; k < g.blocks.size(); ++k) {
      const BlockRecord& r = tl.blocks[g.blocks[k]];
      if (r.role != Role::LayerInput) continue;
      const IdleGap& gap = g.gaps[k];
      // The copy starts once the tensor is written and overlaps the layer's forward;
      // the layer's end waits for it, as vDNN synchronises per layer.
      t.push_back({tl.uses_of(g.blocks[k]).front(), Action::Spill, r.ordinal, gap.last_before});
      t.push_back({gap.last_before + 1, Action::AwaitSpill, r.ordinal, 0});
      t.push_back({groups[g.prev_in_backward].bwd_first, Action::Prefetch, r.ordinal, 0});
    }
  }
  return {framework_plan(std::move(t), tl)};
}

std::vector<StepPlan> TransformerEnginePolicy::plan_step(const StepContext& ctx) {
  const StepTimeline& tl = *ctx.framework_view;
  const auto groups = layer_groups(tl);
  // N: the fewest leading layers whose offload (ideally timed) keeps every launch under budget.
  ExcessTracker tracker = ExcessTracker::over_budget(tl.resident_profile(), ctx.budget);
  std::uint32_t max_layer = 0;
  for (const auto& g : groups) max_layer = std::max(max_layer, g.layer_index + 1);
  std::uint32_t layers = 0;
  while (layers < max_layer && tracker.max_overall() > 0) {
    for (const auto& g : groups)
      if (g.layer_index == layers)
        for (std::size_t k = 0; k < g.blocks.size(); ++k)
          tracker.relieve(g.gaps[k].last_before + 1, g.gaps[k].first_after,
                          static_cast<double>(tl.blocks[g.blocks[k]].bytes));
    ++layers;
  }
  std::vector<Trigger> t;
  for (const LayerGroup& g : groups) {
    if (g.layer_index >= layers) continue;
    const LayerGroup& next = groups[g.next_in_forward];
    for (std::size_t k = 0; k < g.blocks.size(); ++k) {
      const std::uint32_t ord = tl.blocks[g.blocks[k]].ordinal;
      t.push_back({g.fwd_last, Action::Spill, ord, g.gaps[k].last_before});
      t.push_back({next.fwd_last + 1, Action::AwaitSpill, ord, 0});
      t.push_back({groups[g.prev_in_backward].bwd_first, Action::Prefetch, ord, 0});
    }
  }
  return {framework_plan(std::move(t), tl)};
}

std::vector<StepPlan> JaxStaticPolicy::plan_step(const StepContext& ctx) {
  const StepTimeline& tl = *ctx.framework_view;
  const auto groups = layer_groups(tl);
  std::vector<Trigger> t;
  for (const LayerGroup& g : groups) {
    for (std::size_t k = 0; k < g.blocks.size(); ++k) {
      const BlockRecord& r = tl.blocks[g.blocks[k]];
      if (!is_projection_output(r.role)) continue;
      t.push_back({tl.uses_of(g.blocks[k]).front(), Action::Spill, r.ordinal, g.gaps[k].last_before});
      t.push_back({groups[g.prev_in_backward].bwd_first, Action::Prefetch, r.ordinal, 0});
    }
  }
  return {framework_plan(std::move(t), tl)};
}

}  // namespace tierrt::policy
