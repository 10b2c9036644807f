#include "layer_groups.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include "expected_class.hpp"

namespace tierrt::policy {

std::vector<LayerGroup> layer_groups(const StepTimeline& tl) {
  const auto start = ideal_start_times(tl);
  std::map<std::uint32_t, LayerGroup> by_tag;
  for (std::uint32_t b = 0; b < tl.blocks.size(); ++b) {
    const BlockRecord& r = tl.blocks[b];
    if (r.layer == kNoLayer || r.predates_step() || expected_class(r.role) != LifetimeClass::Activation) continue;
    auto gap = longest_gap(tl, b, start);
    if (!gap) continue;
    auto [it, fresh] = by_tag.try_emplace(r.layer);
    LayerGroup& g = it->second;
    if (fresh) {
      g.tag = r.layer;
      g.layer_index = r.layer % kLayersPerMicroBatch;
      g.fwd_first = g.bwd_first = kNever;
    }
    g.blocks.push_back(b);
    g.gaps.push_back(*gap);
    g.fwd_first = std::min(g.fwd_first, tl.uses_of(b).front());
    g.fwd_last = std::max(g.fwd_last, gap->last_before);
    g.bwd_first = std::min(g.bwd_first, gap->first_after);
  }
  std::vector<LayerGroup> groups;
  for (auto& [tag, g] : by_tag) groups.push_back(std::move(g));
  std::sort(groups.begin(), groups.end(), [](auto& a, auto& b) { return a.fwd_first < b.fwd_first; });
  const auto n = static_cast<std::uint32_t>(groups.size());
  for (std::uint32_t i = 0; i < n; ++i) groups[i].next_in_forward = i + 1 < n ? i + 1 : i;
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return groups[a].bwd_first < groups[b].bwd_first; });
  for (std::uint32_t k = 0; k < n; ++k) groups[order[k]].prev_in_backward = k == 0 ? order[k] : order[k - 1];
  return groups;
}

}  // namespace tierrt::policy
