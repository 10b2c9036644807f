// A plan made from the step itself (a framework knows its own step), so the
// follower applies it to every launch.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "layer_groups.hpp"
#include "policies/step_timeline.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt::policy {

inline StepPlan framework_plan(std::vector<Trigger> triggers, const StepTimeline& tl) {
  return StepPlan{{}, TriggerTable(std::move(triggers), static_cast<std::uint32_t>(tl.ops.size())), {}};
}

// What framework-integrated offload does with a saved tensor `select` picks:
// its copy to the host starts once it is written, and it is fetched at the
// start of the backward of the layer before its own. With `await_per_layer`
// the layer's end waits for the copy (vDNN synchronises per layer).
template <class Select>
std::vector<Trigger> offload_when_written(const StepTimeline& tl, const std::vector<LayerGroup>& groups,
                                          Select select, bool await_per_layer) {
  std::vector<Trigger> t;
  for (const LayerGroup& g : groups) {
    for (std::size_t k = 0; k < g.blocks.size(); ++k) {
      const BlockRecord& r = tl.blocks[g.blocks[k]];
      if (!select(r)) continue;
      const IdleGap& gap = g.gaps[k];
      t.push_back({tl.uses_of(g.blocks[k]).front(), Action::Spill, r.ordinal, gap.last_before});
      if (await_per_layer) t.push_back({gap.last_before + 1, Action::AwaitSpill, r.ordinal, 0});
      t.push_back({groups[g.prev_in_backward].bwd_first, Action::Prefetch, r.ordinal, 0});
    }
  }
  return t;
}

}  // namespace tierrt::policy
