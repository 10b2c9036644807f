#include "policies/lifetime_classifier.hpp"

#include <algorithm>
#include <vector>

namespace tierrt::policy {
namespace {

std::vector<double> op_start_times(const StepTimeline& tl) {
  std::vector<double> t(tl.ops.size() + 1, 0);
  for (std::size_t i = 0; i < tl.ops.size(); ++i) t[i + 1] = t[i] + static_cast<double>(tl.ops[i].duration_ns);
  return t;
}

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

std::uint32_t turn_op(const StepTimeline& tl) {
  if (tl.backward_begin) return *tl.backward_begin;
  std::vector<std::int64_t> delta(tl.ops.size() + 1, 0);
  for (const auto& b : tl.blocks) {
    if (b.predates_step() || b.free_op == kNever || b.alloc_op >= b.free_op) continue;
    delta[b.alloc_op] += static_cast<std::int64_t>(b.bytes);
    delta[b.free_op] -= static_cast<std::int64_t>(b.bytes);
  }
  std::int64_t cur = 0, best = -1;
  std::uint32_t at = 0;
  for (std::uint32_t i = 0; i < tl.ops.size(); ++i) {
    cur += delta[i];
    if (cur > best) best = cur, at = i;
  }
  return at;
}

void classify(StepTimeline& tl, const ClassifierOptions& o) {
  const auto t = op_start_times(tl);
  const std::uint32_t turn = turn_op(tl);
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
    // Saved for backward: used before the turn and again at or after it. Something
    // produced and consumed on one side of the turn is only passing through.
    bool spans_turn = false;
    for (std::size_t i = 1; i < uses.size() && !spans_turn; ++i) spans_turn = uses[i - 1] < turn && uses[i] >= turn;
    r.cls = spans_turn ? LifetimeClass::Activation : LifetimeClass::Transient;
  }
}

}  // namespace tierrt::policy
