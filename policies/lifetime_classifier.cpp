#include "policies/lifetime_classifier.hpp"

#include <algorithm>
#include <vector>

#include "policies/idle_gap.hpp"

namespace tierrt::policy {
namespace {

// Longest stretch without a use. Blocks that outlive the step are seen cyclically:
// the idle time runs from the last use over the step boundary to the first.
double longest_idle(const StepTimeline& tl, std::uint32_t b, const std::vector<double>& t) {
  auto uses = tl.uses_of(b);
  const double step = t.back();
  if (uses.empty()) return step;
  double idle = 0;
  for (std::size_t i = 1; i < uses.size(); ++i) idle = std::max(idle, t[uses[i]] - t[uses[i - 1] + 1]);
  const BlockRecord& r = tl.blocks[b];
  const double from = r.predates_step() ? 0 : t[r.alloc_op];
  const double to = r.free_op == kNever ? step : t[std::min<std::size_t>(r.free_op, tl.ops.size())];
  const double head = t[uses.front()] - from, tail = to - t[uses.back() + 1];
  if (r.predates_step() && r.free_op == kNever) return std::max(idle, head + tail);
  return std::max({idle, head, tail});
}

}  // namespace

std::vector<std::uint32_t> turn_ops(const StepTimeline& tl) {
  if (!tl.backward_begins.empty()) return tl.backward_begins;
  std::vector<std::int64_t> delta(tl.ops.size() + 1, 0);
  for (const auto& b : tl.blocks) {
    if (b.predates_step() || b.free_op == kNever || b.alloc_op >= b.free_op) continue;
    delta[b.alloc_op] += static_cast<std::int64_t>(b.bytes);
    delta[b.free_op] -= static_cast<std::int64_t>(b.bytes);
  }
  std::vector<std::int64_t> live(tl.ops.size());
  std::int64_t cur = 0, top = -1;
  std::uint32_t top_at = 0;
  for (std::uint32_t i = 0; i < tl.ops.size(); ++i)
    if ((live[i] = (cur += delta[i])) > top) top = live[i], top_at = i;
  // Peaks with a prominence of at least half the highest: rise that far from the
  // last valley, then fall that far before the next peak counts.
  const std::int64_t prominence = top / 2;
  std::vector<std::uint32_t> turns;
  std::int64_t valley = 0, peak = -1;
  std::uint32_t peak_at = 0;
  bool rising = true;
  for (std::uint32_t i = 0; i < tl.ops.size(); ++i) {
    if (rising) {
      if (live[i] > peak) peak = live[i], peak_at = i;
      if (peak - valley >= prominence && live[i] <= peak - prominence) {
        turns.push_back(peak_at);
        rising = false;
        valley = live[i];
      }
    } else {
      valley = std::min(valley, live[i]);
      if (live[i] - valley >= prominence) rising = true, peak = live[i], peak_at = i;
    }
  }
  if (rising && peak >= 0 && peak - valley >= prominence) turns.push_back(peak_at);
  if (turns.empty() && !tl.ops.empty()) turns.push_back(top_at);
  return turns;
}

void classify(StepTimeline& tl, const ClassifierOptions& o) {
  const auto t = ideal_start_times(tl);
  const std::vector<std::uint32_t> turns = turn_ops(tl);
  for (std::uint32_t b = 0; b < tl.blocks.size(); ++b) {
    BlockRecord& r = tl.blocks[b];
    auto uses = tl.uses_of(b);
    if (r.use_count() >= o.workspace_min_uses && longest_idle(tl, b, t) <= o.workspace_max_idle_fraction * t.back()) {
      r.cls = LifetimeClass::Workspace;
      continue;
    }
    if (r.predates_step() || r.free_op == kNever) {
      r.cls = LifetimeClass::Persistent;
      continue;
    }
    // Saved for backward: used before a turn and again at or after it. Something
    // produced and consumed on one side of every turn is only passing through.
    bool spans_turn = false;
    for (std::size_t i = 1; i < uses.size() && !spans_turn; ++i) {
      auto t = std::lower_bound(turns.begin(), turns.end(), uses[i - 1] + 1);  // first turn after the earlier use
      spans_turn = t != turns.end() && *t <= uses[i];
    }
    r.cls = spans_turn ? LifetimeClass::Activation : LifetimeClass::Transient;
  }
}

}  // namespace tierrt::policy
