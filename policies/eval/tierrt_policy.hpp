// tierrt's planner as one of the policies the replay compares: it sees only the
// event stream (never the framework's view of the step) and, where the plan falls
// short, leaves the victims to the safe reactive choice, as the runtime does.
#pragma once

#include <string_view>
#include <vector>

#include "policies/eval/policy.hpp"
#include "policies/planner_policy.hpp"

namespace tierrt::policy {

class TierrtPolicy final : public Policy {
 public:
  explicit TierrtPolicy(PlannerOptions options = {}) : planner_(options) {}

  std::string_view name() const override { return "tierrt"; }
  std::vector<StepPlan> plan_step(const StepContext& ctx) override { return planner_.plan_step(ctx.budget, ctx.link); }
  void observe(const StepTimeline& observed, const SimResult& outcome) override { planner_.observe(observed, outcome); }

  const PlannerPolicy& planner() const { return planner_; }

 private:
  PlannerPolicy planner_;
};

}  // namespace tierrt::policy
