// The planner as a policy: reactive while it learns (the first step, any step of a
// shape it has not seen), planned afterwards. It keeps one plan per step shape it has
// seen, so an eval step in between or a changed shape does not make it follow the
// wrong plan, and it feeds late prefetches back as earlier triggers.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "policies/link_model.hpp"
#include "policies/planner.hpp"
#include "policies/step_simulator.hpp"
#include "policies/step_timeline.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt::policy {

class PlannerPolicy {
 public:
  explicit PlannerPolicy(PlannerOptions options = {}) : options_(options) {}

  // Alternatives for the coming step, most likely first (none before anything was
  // observed); the follower keeps the first one the step still matches.
  std::vector<StepPlan> plan_step(std::uint64_t budget, const LinkModel& link);
  // After each step: its observed (classified) timeline and what happened in it.
  void observe(const StepTimeline& observed, const SimResult& outcome);

  // Mispredictions: blocks the plan spilled that were fetched on demand.
  std::uint64_t mispredictions() const { return mispredictions_; }
  std::uint64_t late_prefetches() const { return late_prefetches_; }
  // The extra lead the feedback gave `ordinal`'s prefetch in the shape observed last.
  double lead_ns(std::uint32_t ordinal) const;
  // What the planner believes of the shape observed last (null before any).
  const StepTimeline* last_timeline() const;

 private:
  struct Shape {
    StepTimeline timeline;
    PrefetchLeads leads;
    // Feedback is a search: keep the leads of the least-stalled planned step, and
    // when a correction made things worse, return to them and correct by less.
    PrefetchLeads best_leads;
    double best_stall_ns = -1;
    double step_size = 1;
    StepPlan plan;
    bool stale = true;
    std::size_t last_seen = 0;
    std::size_t times_seen = 0;
  };

  PlannerOptions options_;
  std::unordered_map<std::uint64_t, Shape> shapes_;
  std::uint64_t last_budget_ = 0;
  std::uint64_t last_signature_ = 0;
  std::size_t observed_ = 0;
  std::uint64_t mispredictions_ = 0, late_prefetches_ = 0;
};

}  // namespace tierrt::policy
