// What every policy offers the replay: a plan per step, victims when memory runs
// short, and a chance to learn from what happened.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "policies/link_model.hpp"
#include "policies/step_simulator.hpp"
#include "policies/step_timeline.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt::policy {

// A step as a policy makes the device run it when it adds work to the compute
// stream: a recomputing policy frees the tensors it does not keep after their last
// forward use and makes them again in launches added before their layer's backward
// pass; save_on_cpu queues its copies on the compute stream. The simulator runs
// `timeline` instead of the recorded step, so that work costs its time and memory.
struct ExecutedStep {
  StepTimeline timeline;
  std::vector<std::uint32_t> recomputed;  // blocks (indices in the recorded step) made again in backward
  double recompute_ns = 0;                // time of the recompute launches added
  double stream_copy_ns = 0;              // time of the copies added to the compute stream
};

struct StepContext {
  std::uint64_t budget = 0;
  LinkModel link;
  // The step about to run, as the framework itself knows it (tensor roles, layers,
  // the order it will launch; for a policy with an executed_step, the step as it
  // runs it). Only baselines that model framework-integrated
  // offload (vDNN, Transformer Engine, JAX, save_on_cpu, checkpointing) may read it; policies that learn from
  // the event stream must not.
  const StepTimeline* framework_view = nullptr;
};

class Policy : public VictimChooser {
 public:
  virtual std::string_view name() const = 0;
  // Baselines that select tensors by name need Tag events in the trace.
  virtual bool needs_roles() const { return false; }
  // The no-offload reference runs without a budget.
  virtual bool respects_budget() const { return true; }
  // The step as this policy runs it when that is not the recorded one (recompute,
  // copies on the compute stream); nothing for policies that only move tensors on
  // the copy engines.
  virtual std::optional<ExecutedStep> executed_step(const StepTimeline& recorded, const LinkModel& link) const {
    (void)recorded;
    (void)link;
    return std::nullopt;
  }
  // Alternatives for the coming step; the follower keeps the one the step matches.
  virtual std::vector<StepPlan> plan_step(const StepContext& ctx) = 0;
  // Called after each step with its observed (classified) timeline and outcome.
  virtual void observe(const StepTimeline& observed, const SimResult& outcome) {
    (void)observed;
    (void)outcome;
  }
  // Default: the safe reactive choice.
  void choose(const VictimQuery& query, std::vector<std::uint32_t>& out) override { coldest_.choose(query, out); }

 private:
  SafeReactive coldest_;
};

}  // namespace tierrt::policy
