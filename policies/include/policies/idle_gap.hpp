// The stretch a block sits unused: between which two launches, and for how long if
// nothing stalls. Spill and prefetch windows are placed in this gap.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "policies/step_timeline.hpp"

namespace tierrt::policy {

// Start time of each launch with no stalls; one extra entry holds the step's end.
std::vector<double> ideal_start_times(const StepTimeline& tl);

struct IdleGap {
  std::uint32_t last_before = 0;  // the last launch before the gap (spill after it)
  std::uint32_t first_after = 0;  // the launch that needs the block again (prefetch before it)
  double ns = 0;                  // idle time between the two, without stalls
};

// The longest gap between two consecutive uses; none for blocks used fewer than twice.
std::optional<IdleGap> longest_gap(const StepTimeline& tl, std::uint32_t block, const std::vector<double>& start);

}  // namespace tierrt::policy
