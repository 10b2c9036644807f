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
  auto offloaded = [](const BlockRecord& r) { return is_projection_output(r.role); };
  return {framework_plan(offload_when_written(tl, layer_groups(tl), offloaded, /*await_per_layer=*/false), tl)};
}

}  // namespace tierrt::policy
