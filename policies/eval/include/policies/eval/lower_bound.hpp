// A lower bound on the step time any schedule can reach at a budget: compute, plus
// the stall that no order of copies of the recorded step can hide (a policy that
// recomputes runs another step and may go below it). Two constraints, each valid
// for every such policy:
//  - out: before launch i, at least excess(i) bytes must have crossed the D2H engine,
//    which started no earlier than the step, less the bytes of lazy blocks (granule-
//    group members) not used yet, which may start on the host with no copy;
//  - back: of the bytes off the device at the peak, those that launches up to j need
//    (all but what stays unused until after j) must cross the H2D engine between the
//    peak and launch j.
// The outbound stall of launches up to the peak and the return stall after it fall
// in disjoint stretches of the step, so the bound adds them (and keeps the larger
// of that sum and the outbound stall of any launch).
#pragma once

#include <cstdint>

#include "policies/link_model.hpp"
#include "policies/step_timeline.hpp"

namespace tierrt::policy {

struct LowerBound {
  double compute_ns = 0;
  double stall_ns = 0;
  bool feasible = true;  // false: some launch alone needs more than the budget
  double step_ns() const { return compute_ns + stall_ns; }
};

LowerBound lower_bound(const StepTimeline& tl, std::uint64_t budget, const LinkModel& link);

}  // namespace tierrt::policy
