#include "baseline_policies.hpp"

#include <algorithm>

#include "added_launches.hpp"
#include "framework_plan.hpp"
#include "layer_groups.hpp"
#include "policies/excess_tracker.hpp"

namespace tierrt::policy {

void ReactiveLruPolicy::choose(const VictimQuery& q, std::vector<std::uint32_t>& out) {
  std::vector<VictimCandidate> c(q.candidates.begin(), q.candidates.end());
  std::sort(c.begin(), c.end(), [](auto& a, auto& b) { return a.last_use_ns < b.last_use_ns; });
  for (const auto& v : c) out.push_back(v.block);
}

std::vector<StepPlan> VdnnPolicy::plan_step(const StepContext& ctx) {
  const StepTimeline& tl = *ctx.framework_view;
  // In a transformer every kernel is a vDNN "layer", and what backward keeps of
  // each is its input feature maps: every saved tensor of the step, not only the
  // residual stream (that covered about a tenth of the activation bytes).
  auto every = [](const BlockRecord&) { return true; };
  return {framework_plan(offload_when_written(tl, layer_groups(tl), every, /*await_per_layer=*/true), tl)};
}

std::vector<StepPlan> TransformerEnginePolicy::plan_step(const StepContext& ctx) {
  const StepTimeline& tl = *ctx.framework_view;
  const auto groups = layer_groups(tl);
  // N: the fewest leading layers whose offload (ideally timed) keeps every launch under budget.
  ExcessTracker tracker = ExcessTracker::over_budget(tl.resident_profile(), ctx.budget);
  std::uint32_t max_layer = 0;
  for (const auto& g : groups) max_layer = std::max(max_layer, g.layer_index + 1);
  std::uint32_t layers = 0;
  while (layers < max_layer && tracker.max_overall() > 0) {
    for (const auto& g : groups)
      if (g.layer_index == layers)
        for (std::size_t k = 0; k < g.blocks.size(); ++k)
          tracker.relieve(g.gaps[k].last_before + 1, g.gaps[k].first_after,
                          static_cast<double>(tl.blocks[g.blocks[k]].bytes));
    ++layers;
  }
  std::vector<Trigger> t;
  for (const LayerGroup& g : groups) {
    if (g.layer_index >= layers) continue;
    const LayerGroup& next = groups[g.next_in_forward];
    for (std::size_t k = 0; k < g.blocks.size(); ++k) {
      const std::uint32_t ord = tl.blocks[g.blocks[k]].ordinal;
      t.push_back({g.fwd_last, Action::Spill, ord, g.gaps[k].last_before});
      t.push_back({next.fwd_last + 1, Action::AwaitSpill, ord, 0});
      t.push_back({groups[g.prev_in_backward].bwd_first, Action::Prefetch, ord, 0});
    }
  }
  return {framework_plan(std::move(t), tl)};
}

std::optional<ExecutedStep> SaveOnCpuPolicy::executed_step(const StepTimeline& recorded, const LinkModel& link) const {
  // The pack hook's non-blocking copy is queued on the compute stream behind the
  // kernel that wrote the tensor: the next kernel starts only once it is done, so
  // the copy's whole time adds to the step. (Each launch added here stands for it.)
  std::vector<AddedLaunch> copies;
  for (const LayerGroup& g : layer_groups(recorded))
    for (std::uint32_t b : g.blocks) {
      AddedLaunch copy;
      copy.kind = AddedLaunch::Kind::StreamCopy;
      copy.before_op = recorded.uses_of(b).front() + 1;
      copy.reads = {b};
      copy.ns = link.d2h_ns(static_cast<double>(recorded.blocks[b].bytes));
      copies.push_back(std::move(copy));
    }
  if (copies.empty()) return std::nullopt;
  return with_added_launches(recorded, copies);
}

std::vector<StepPlan> SaveOnCpuPolicy::plan_step(const StepContext& ctx) {
  const StepTimeline& tl = *ctx.framework_view;  // the executed step, with the copy launches
  std::vector<Trigger> t;
  for (const LayerGroup& g : layer_groups(tl)) {
    for (std::size_t k = 0; k < g.blocks.size(); ++k) {
      const BlockRecord& r = tl.blocks[g.blocks[k]];
      // Starts with its compute-stream copy launch (right after the writer) and
      // lasts as long, so the engine mirrors the stream. The device tensor goes when
      // forward no longer reads it.
      t.push_back({tl.uses_of(g.blocks[k]).front(), Action::Spill, r.ordinal, g.gaps[k].last_before});
      // No prefetch: unpack copies it back when backward first reads it, on the
      // compute stream (the model's demand fetch, which the launch waits for).
    }
  }
  return {framework_plan(std::move(t), tl)};
}

}  // namespace tierrt::policy
