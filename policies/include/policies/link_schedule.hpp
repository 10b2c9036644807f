// What a plan asks of the host link, placed on a timeline of launch start times:
// each copy engine serves the plan's copies in the order the follower queues them,
// one at a time, at the link's rate. A copy fits its window when it ends by the
// time it is due: a spill before its block's prefetch is issued (else the link
// carried it for nothing: the block is needed back before it was ever off), a
// prefetch before its block's next use. The planner keeps only plans whose every
// copy fits on the timeline the step model gave them, so it never plans more
// traffic than the link carries between two launches.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "policies/link_model.hpp"
#include "policies/step_timeline.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt::policy {

struct ScheduledCopy {
  std::uint32_t ordinal = 0;  // the block, as its trigger names it (StepTimeline::name_of)
  double bytes = 0;
  double ready_ns = 0;  // queued: a spill when its launch ends, a prefetch when its launch is issued
  double start_ns = 0, end_ns = 0;
  double due_ns = 0;

  bool fits() const;
};

struct LinkSchedule {
  std::vector<ScheduledCopy> d2h, h2d;  // in queue order

  bool fits() const;
  // Spills, and prefetches, that end after they are due (ordinals).
  std::vector<std::uint32_t> late_spills() const;
  std::vector<std::uint32_t> late_fetches() const;
  // When a spill queued at `ready_ns` would end, behind every spill queued before it.
  double spill_end_if_queued(double ready_ns, double bytes, const LinkModel& link) const;
};

// The first launch the follower issues at or after `time_ns` (a launch is issued
// once the one before it has ended); the launch count when none is.
std::uint32_t first_issued_at_or_after(const StepTimeline& tl, std::span<const double> launch_start_ns, double time_ns);

// `launch_start_ns` holds when each launch of `tl` starts and, last, when the step
// ends (SimResult::launch_start_ns). Triggers for blocks the step lacks are skipped.
LinkSchedule schedule_copies(const StepTimeline& tl, const TriggerTable& triggers,
                             std::span<const double> launch_start_ns, const LinkModel& link);

}  // namespace tierrt::policy
