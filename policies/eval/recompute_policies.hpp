// Baselines that trade compute for memory: they recompute in backward what they do
// not keep, so they run a different step than the recorded one (executed_step) and
// pay the recompute on the compute stream.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "policies/eval/policy.hpp"

namespace tierrt::policy {

// Activation checkpointing as PyTorch's torch.utils.checkpoint around each decoder
// layer: only the layer's input is kept; the layer's forward runs again before its
// backward pass (its whole forward time) and remakes everything else it saved.
// Nothing is offloaded; where the budget is still short, the safe reactive fallback
// spills.
class CheckpointPolicy final : public Policy {
 public:
  std::string_view name() const override { return "checkpoint"; }
  bool needs_roles() const override { return true; }
  std::optional<ExecutedStep> executed_step(const StepTimeline& recorded, const LinkModel& link) const override;
  std::vector<StepPlan> plan_step(const StepContext&) override { return {}; }
};

// JAX/XLA remat with host offload of named tensors (jax.checkpoint with
// save_and_offload_only_these_names, offload_dst pinned_host): every layer's
// projection outputs (Q, K, V, attention output, MLP up and gate, expert
// activations) leave right after they are written and are prefetched one layer
// ahead in the backward pass, whatever the budget; the layer input is kept; every
// other saved tensor is recomputed before the layer's backward from those, with
// only the launches it needs (XLA prunes the rematerialized computation).
class JaxRematOffloadPolicy final : public Policy {
 public:
  std::string_view name() const override { return "jax"; }
  bool needs_roles() const override { return true; }
  std::optional<ExecutedStep> executed_step(const StepTimeline& recorded, const LinkModel& link) const override;
  std::vector<StepPlan> plan_step(const StepContext& ctx) override;
};

}  // namespace tierrt::policy
