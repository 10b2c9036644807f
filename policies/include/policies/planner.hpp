// tierrt's planner: from one observed step, the activations to spill and when, so
// that the device budget holds at every launch of the next step with the least
// modeled stall. Blocks off over the peak come first (each saves its whole size
// there for one round trip), those whose idle gap hides the round trip before
// those whose gap does not, earliest written first among equals. Spills go right
// after the last use before a block's idle gap; prefetches as late as the H2D
// queue (in order of next use) allows, no earlier than the link can have carried
// the spill, and under a memory floor (prefetch_placement.hpp); moved earlier
// where the model or last step's measurement found them late.
//
// Each plan is replayed in the step simulator and its copies placed on the
// timeline it got there (link_schedule.hpp). The plan handed out is the one with
// the least modeled stall among those whose every copy fits its window: the
// planner never plans more traffic than the link carries between two launches.
// Corrections between rounds drop spills the link could not carry before their
// block was needed back, and where memory ran short add only spills the link
// carries, behind those already queued, before the peak.
#pragma once

#include <cstdint>
#include <vector>

#include "policies/link_model.hpp"
#include "policies/prefetch_placement.hpp"
#include "policies/step_simulator.hpp"
#include "policies/step_timeline.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt::policy {

struct PlannerOptions {
  bool spill_all = false;    // spill every activation, not just enough for the budget
  std::uint32_t max_rounds = 6;  // plan / simulate / correct iterations
};

struct PlanResult {
  StepPlan plan;
  SimResult modeled;                  // the plan replayed on the step it was made from (with its launch times)
  std::vector<std::uint32_t> spilled; // block indices in the observed step, of this plan
  std::uint32_t rounds = 0;           // the round that made it
};

// `tl` must be classified (see lifetime_classifier.hpp). Measured copy rates in the
// timeline override the link model's.
PlanResult plan_step(const StepTimeline& tl, std::uint64_t budget, LinkModel link, const PrefetchLeads& leads,
                     const PlannerOptions& options = {});

}  // namespace tierrt::policy
