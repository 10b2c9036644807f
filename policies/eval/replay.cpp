#include "replay.hpp"

#include <limits>
#include <optional>

namespace tierrt::policy {

ReplayRun replay(const std::vector<StepTimeline>& steps, Policy& policy, const ReplayOptions& o) {
  ReplayRun run;
  run.policy = std::string(policy.name());
  const std::uint64_t budget = policy.respects_budget() ? o.budget : std::numeric_limits<std::uint64_t>::max();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::optional<ExecutedStep> executed = policy.executed_step(steps[i], o.link);
    const StepTimeline& runs = executed ? executed->timeline : steps[i];
    StepContext ctx{budget, o.link, &runs};
    const auto plans = policy.plan_step(ctx);
    SimOptions sim{budget, o.link, o.record_residency && i + 1 == steps.size(), {}};
    run.steps.push_back(simulate_step(runs, plans, policy, sim));
    policy.observe(steps[i], run.steps.back());
    if (i + 1 == steps.size() && executed) {
      run.recompute_ns = executed->recompute_ns;
      run.stream_copy_ns = executed->stream_copy_ns;
      for (std::uint32_t b : executed->recomputed)
        if (steps[i].blocks[b].cls == LifetimeClass::Activation) run.recomputed_activation_bytes += steps[i].blocks[b].bytes;
    }
  }
  return run;
}

}  // namespace tierrt::policy
