// When the planner's prefetches are issued. One H2D engine serves them in order of
// next use, so each is placed as late as the link allows and still leaves room for
// the ones after it. A prefetch also takes device memory when it starts: started
// while the launches before the block's use still need that memory, it is the
// coldest block on the device and the safe reactive path evicts it again, to come
// back on demand. A memory floor keeps it from starting before the budget has room
// for it up to its use; how strict that floor is, is one of the choices the planner
// checks in the step model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "policies/idle_gap.hpp"
#include "policies/link_model.hpp"
#include "policies/step_timeline.hpp"

namespace tierrt::policy {

// Extra lead (ns) per block ordinal for the prefetch: what the feedback loop learned.
struct PrefetchLeads {
  std::vector<double> ns;
  double at(std::uint32_t ordinal) const { return ordinal < ns.size() ? ns[ordinal] : 0; }
  void add(std::uint32_t ordinal, double more);
};

enum class MemoryFloor : std::uint8_t {
  None,            // as late as the link allows, whatever memory says (the step model makes it wait for room)
  WhereCoverable,  // not while a launch before its use would go over budget, except launches that go over whatever is spilled
  Strict,          // not while any launch before its use would go over budget
};

struct SpilledBlock {
  std::uint32_t block = 0;  // index in the timeline
  double bytes = 0;
  IdleGap gap;  // spilled after gap.last_before, needed again by gap.first_after
  // The first launch issued after its spill can have ended (the link carries the
  // spills queued before it first); 0 when not known. A prefetch issued earlier
  // finds the block still leaving: the spill took the link's time for nothing.
  std::uint32_t out_by = 0;
};

// The launch at which each block's prefetch is issued, parallel to `spilled`, which
// must be in the order the H2D engine serves them: by next use (gap.first_after),
// then latest spilled first. `start` is ideal_start_times(tl).
std::vector<std::uint32_t> place_prefetches(const StepTimeline& tl, std::span<const SpilledBlock> spilled,
                                            const std::vector<double>& start, const LinkModel& link,
                                            const PrefetchLeads& leads, std::uint64_t budget, MemoryFloor floor);

}  // namespace tierrt::policy
