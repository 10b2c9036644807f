// The policies tierrt's planner is measured against, each as its published design
// describes it, adapted to a transformer step. All share the safe reactive fallback
// (spill the coldest step-local block when over budget, fetch on demand).
#pragma once

#include <cstdint>
#include <optional>
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

// vDNN (vDNN_all): offload every layer's input feature maps as soon as they are
// written, overlapped with that layer's forward pass, which then waits for the copy;
// prefetch one layer ahead in the backward pass. In a transformer step every saved
// tensor is some kernel's input feature map, so all of them go.
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

// PyTorch's torch.autograd.graph.save_on_cpu(pin_memory=True): the pack hook copies
// every saved tensor to pinned host memory with a non-blocking copy on the current
// (compute) stream, so the copy serialises with the kernels around it; unpack copies
// it back on the same stream when backward reads it, with no prefetch. Every saved
// tensor leaves, whatever the budget. (PyTorch packs once per save, so a tensor
// saved by several ops is copied several times; the model copies it once, which
// flatters save_on_cpu.)
class SaveOnCpuPolicy final : public Policy {
 public:
  std::string_view name() const override { return "save_on_cpu"; }
  bool needs_roles() const override { return true; }
  // The copies, as launches on the compute stream.
  std::optional<ExecutedStep> executed_step(const StepTimeline& recorded, const LinkModel& link) const override;
  // The same copies on the D2H engine, timed alike, so that the model releases the
  // device memory and counts the bytes.
  std::vector<StepPlan> plan_step(const StepContext& ctx) override;
};

}  // namespace tierrt::policy
