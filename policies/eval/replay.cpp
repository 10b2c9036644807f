#include "replay.hpp"

#include <limits>

namespace tierrt::policy {

ReplayRun replay(const std::vector<StepTimeline>& steps, Policy& policy, const ReplayOptions& o) {
  ReplayRun run;
  run.policy = std::string(policy.name());
  const std::uint64_t budget = policy.respects_budget() ? o.budget : std::numeric_limits<std::uint64_t>::max();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    StepContext ctx{budget, o.link, &steps[i]};
    const auto plans = policy.plan_step(ctx);
    SimOptions sim{budget, o.link, o.record_residency && i + 1 == steps.size(), {}};
    run.steps.push_back(simulate_step(steps[i], plans, policy, sim));
    policy.observe(steps[i], run.steps.back());
  }
  return run;
}

}  // namespace tierrt::policy
