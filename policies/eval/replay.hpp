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
  // What a recomputing policy made again in the last step: activation bytes (of the
  // recorded step's classification) and the time of the launches it added.
  std::uint64_t recomputed_activation_bytes = 0;
  double recompute_ns = 0;
  double stream_copy_ns = 0;  // copies a policy queued on the compute stream (save_on_cpu)
};

// `steps` must be classified. The policy is used as given (it keeps what it learns).
// A policy with an executed step (recompute, copies on the compute stream) runs and
// plans for that step; it learns from the recorded one.
ReplayRun replay(const std::vector<StepTimeline>& steps, Policy& policy, const ReplayOptions& options);

}  // namespace tierrt::policy
