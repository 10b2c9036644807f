// The policies tierrt's planner is measured against, each as its published design
// describes it, adapted to a transformer step. All share the safe reactive fallback
// (spill the coldest step-local block when over budget, fetch on demand).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "policies/eval/policy.hpp"

namespace tierrt::policy {

// Nothing moves; the reference for "overhead over no offload" (ignores the budget).
class NoOffloadPolicy final : public Policy {
 public:
  std::string_view name() const override { return "none"; }
  bool respects_budget() const override { return false; }
  std::vector<StepPlan> plan_step(const StepContext&) override { return {}; }
  void choose(const VictimQuery&, std::vector<std::uint32_t>&) override {}
};

// Purely reactive and unaware of classes (UVM-like): when memory is short the least
// recently used block goes, weights included; anything missing is fetched on demand.
class ReactiveLruPolicy final : public Policy {
 public:
  std::string_view name() const override { return "lru"; }
  std::vector<StepPlan> plan_step(const StepContext&) override { return {}; }
  void choose(const VictimQuery& query, std::vector<std::uint32_t>& out) override;
};

// vDNN: offload every layer's input as soon as it is written, overlapped with that
// layer's forward pass, which then waits for the copy; prefetch one layer ahead in
// the backward pass.
class VdnnPolicy final : public Policy {
 public:
  std::string_view name() const override { return "vdnn"; }
  bool needs_roles() const override { return true; }
  std::vector<StepPlan> plan_step(const StepContext& ctx) override;
};

// Transformer Engine's CPU offload: all saved tensors of the first N layers, N the
// fewest that bring the step under budget; a layer's offload must finish by the end
// of the next layer's forward, and a layer is reloaded when the backward pass of the
// layer above it starts.
class TransformerEnginePolicy final : public Policy {
 public:
  std::string_view name() const override { return "te"; }
  bool needs_roles() const override { return true; }
  std::vector<StepPlan> plan_step(const StepContext& ctx) override;
};

// JAX/XLA static host offload of named tensors (remat policy with offload_dst
// pinned_host): every layer's projection outputs (Q, K, V, attention output, MLP up
// and gate, expert activations) leave right after they are written and are prefetched
// one layer ahead in the backward pass, whatever the budget.
class JaxStaticPolicy final : public Policy {
 public:
  std::string_view name() const override { return "jax"; }
  bool needs_roles() const override { return true; }
  std::vector<StepPlan> plan_step(const StepContext& ctx) override;
};

}  // namespace tierrt::policy
