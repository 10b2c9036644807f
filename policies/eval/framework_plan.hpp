// A plan made from the step itself (a framework knows its own step), so the
// follower applies it to every launch.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "policies/step_timeline.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt::policy {

inline StepPlan framework_plan(std::vector<Trigger> triggers, const StepTimeline& tl) {
  return StepPlan{{}, TriggerTable(std::move(triggers), static_cast<std::uint32_t>(tl.ops.size()))};
}

}  // namespace tierrt::policy
