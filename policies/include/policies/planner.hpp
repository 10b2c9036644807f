// tierrt's planner: from one observed step, the activations to spill and when, so
// that the device budget holds at every launch of the next step with the least
// modeled stall. Spills go right after the last use before a block's idle gap;
// prefetches are placed as late as the H2D queue (in order of next use) allows, and
// moved earlier where the model or last step's measurement found them late. The plan
// is checked against the step simulator before it is handed out.
#pragma once

#include <cstdint>
#include <vector>

#include "policies/link_model.hpp"
#include "policies/step_simulator.hpp"
#include "policies/step_timeline.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt::policy {

struct PlannerOptions {
  bool spill_all = false;    // spill every activation, not just enough for the budget
  std::uint32_t max_rounds = 6;  // plan / simulate / correct iterations
};

// Extra lead (ns) per block ordinal for the prefetch: what the feedback loop learned.
struct PrefetchLeads {
  std::vector<double> ns;
  double at(std::uint32_t ordinal) const { return ordinal < ns.size() ? ns[ordinal] : 0; }
  void add(std::uint32_t ordinal, double more);
};

struct PlanResult {
  StepPlan plan;
  SimResult modeled;                  // the plan replayed on the step it was made from
  std::vector<std::uint32_t> spilled; // block indices in the observed step
  std::uint32_t rounds = 0;
};

// `tl` must be classified (see lifetime_classifier.hpp). Measured copy rates in the
// timeline override the link model's.
PlanResult plan_step(const StepTimeline& tl, std::uint64_t budget, LinkModel link, const PrefetchLeads& leads,
                     const PlannerOptions& options = {});

}  // namespace tierrt::policy
