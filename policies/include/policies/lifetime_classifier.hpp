// Assigns a lifetime class to every block of a step from what was observed (when
// it was allocated relative to the turn from forward to backward, how often and how
// regularly it was used, whether it outlived the step), never from names.
#pragma once

#include <cstdint>
#include <vector>

#include "policies/step_timeline.hpp"

namespace tierrt::policy {

struct ClassifierOptions {
  // Workspace: touched by at least this many launches and never idle longer than this
  // fraction of the step.
  std::uint32_t workspace_min_uses = 16;
  double workspace_max_idle_fraction = 0.10;
};

// The launches where the step turns from forward to backward, one per micro-batch:
// the Phase(Backward) markers when there are any, else the peaks of step-local
// memory that stand out by at least half the highest one (gradient accumulation
// makes several).
std::vector<std::uint32_t> turn_ops(const StepTimeline& tl);

void classify(StepTimeline& tl, const ClassifierOptions& options = {});

}  // namespace tierrt::policy
