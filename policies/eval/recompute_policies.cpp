#include "recompute_policies.hpp"

#include "framework_plan.hpp"
#include "layer_groups.hpp"
#include "layer_recompute.hpp"
#include "added_launches.hpp"

namespace tierrt::policy {
namespace {

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

std::optional<ExecutedStep> recomputing(const StepTimeline& recorded, const std::vector<AddedLaunch>& layers) {
  if (layers.empty()) return std::nullopt;  // no tagged layer: the step runs as recorded
  return with_added_launches(recorded, layers);
}

}  // namespace

std::optional<ExecutedStep> CheckpointPolicy::executed_step(const StepTimeline& recorded, const LinkModel&) const {
  return recomputing(recorded, layer_recomputes(recorded, [](Role) { return false; }, RecomputeCost::WholeForward));
}

std::optional<ExecutedStep> JaxRematOffloadPolicy::executed_step(const StepTimeline& recorded, const LinkModel&) const {
  return recomputing(recorded, layer_recomputes(recorded, is_projection_output, RecomputeCost::NeededLaunches));
}

// Planned on the executed step, where the recomputed tensors are no longer saved:
// a layer's backward now begins with its recompute, which reads the offloaded
// tensors, so the prefetch one layer ahead targets that launch.
std::vector<StepPlan> JaxRematOffloadPolicy::plan_step(const StepContext& ctx) {
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
