#include "policies/idle_gap.hpp"

namespace tierrt::policy {

std::vector<double> ideal_start_times(const StepTimeline& tl) {
  std::vector<double> t(tl.ops.size() + 1, 0);
  for (std::size_t i = 0; i < tl.ops.size(); ++i) t[i + 1] = t[i] + static_cast<double>(tl.ops[i].duration_ns);
  return t;
}

std::optional<IdleGap> longest_gap(const StepTimeline& tl, std::uint32_t block, const std::vector<double>& start) {
  auto uses = tl.uses_of(block);
  std::optional<IdleGap> best;
  for (std::size_t i = 1; i < uses.size(); ++i) {
    const double ns = start[uses[i]] - start[uses[i - 1] + 1];
    if (!best || ns > best->ns) best = IdleGap{uses[i - 1], uses[i], ns};
  }
  return best;
}

}  // namespace tierrt::policy
