// Replaying a sequence of steps through a policy in the step simulator: the policy
// plans each step from what it has seen, the model runs the step, the policy learns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policies/eval/policy.hpp"
#include "policies/link_model.hpp"
#include "policies/step_simulator.hpp"
#include "policies/step_timeline.hpp"

namespace tierrt::policy {

struct ReplayOptions {
  std::uint64_t budget = 0;
  LinkModel link;
  bool record_residency = false;  // for the last step only
};

struct ReplayRun {
  std::string policy;
  std::vector<SimResult> steps;  // one per timeline, in order
};

// `steps` must be classified. The policy is used as given (it keeps what it learns).
ReplayRun replay(const std::vector<StepTimeline>& steps, Policy& policy, const ReplayOptions& options);

}  // namespace tierrt::policy
