// What every policy offers the replay: a plan per step, victims when memory runs
// short, and a chance to learn from what happened.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "policies/link_model.hpp"
#include "policies/step_simulator.hpp"
#include "policies/step_timeline.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt::policy {

struct StepContext {
  std::uint64_t budget = 0;
  LinkModel link;
  // The step about to run, as the framework itself knows it (tensor roles, layers,
  // the order it will launch). Only baselines that model framework-integrated
  // offload (vDNN, Transformer Engine, JAX) may read it; policies that learn from
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
