#include "policies/planner_policy.hpp"

#include <algorithm>

#include "policies/lifetime_classifier.hpp"

namespace tierrt::policy {
namespace {
constexpr std::size_t kMaxAlternatives = 4;
}

std::vector<StepPlan> PlannerPolicy::plan_step(std::uint64_t budget, const LinkModel& link) {
  if (budget != last_budget_)
    for (auto& [sig, s] : shapes_) s.stale = true;
  last_budget_ = budget;
  std::vector<Shape*> recent;
  for (auto& [sig, s] : shapes_) recent.push_back(&s);
  // The shape seen most often first (a training step, not the odd eval step), then
  // the most recent: a follower keeps the first alternative still matching.
  std::sort(recent.begin(), recent.end(), [](Shape* a, Shape* b) {
    return a->times_seen != b->times_seen ? a->times_seen > b->times_seen : a->last_seen > b->last_seen;
  });
  if (recent.size() > kMaxAlternatives) recent.resize(kMaxAlternatives);
  std::vector<StepPlan> out;
  for (Shape* s : recent) {
    if (s->stale) {
      s->plan = policy::plan_step(s->timeline, budget, link, s->leads, options_).plan;
      s->stale = false;
    }
    out.push_back(s->plan);
  }
  return out;
}

void PlannerPolicy::observe(const StepTimeline& observed, const SimResult& outcome) {
  ++observed_;
  last_signature_ = observed.signature;
  auto [it, fresh] = shapes_.try_emplace(observed.signature);
  Shape& shape = it->second;
  // Feedback only applies when the plan followed was made for this very shape.
  const bool planned = !fresh && outcome.plan_alternative >= 0 && outcome.plan_ops == observed.ops.size();
  if (planned) {
    if (shape.best_stall_ns < 0 || outcome.stall_ns < shape.best_stall_ns) {
      shape.best_stall_ns = outcome.stall_ns;
      shape.best_leads = shape.leads;
    } else {
      shape.leads = shape.best_leads;
      shape.step_size /= 2;
    }
    for (std::uint32_t b = 0; b < observed.blocks.size(); ++b) {
      if (observed.blocks[b].predates_step()) continue;
      if (outcome.late_ns[b] > 0) shape.leads.add(observed.blocks[b].ordinal, outcome.late_ns[b] * shape.step_size);
      if (outcome.demanded[b]) ++mispredictions_;
    }
    late_prefetches_ += outcome.late_prefetches;
  }
  // A launch's measured time includes the stalls moves caused (the device
  // waiting for a fetch); they only ever add. The shortest seen is the
  // launch's own time. Zero means not measured.
  std::vector<std::uint64_t> shortest;
  if (!fresh && shape.timeline.ops.size() == observed.ops.size())
    for (std::size_t i = 0; i < observed.ops.size(); ++i) {
      const std::uint64_t before = shape.timeline.ops[i].duration_ns, now = observed.ops[i].duration_ns;
      shortest.push_back(before > 0 && (now == 0 || before < now) ? before : now);
    }
  shape.timeline = observed;
  for (std::size_t i = 0; i < shortest.size(); ++i) shape.timeline.ops[i].duration_ns = shortest[i];
  classify(shape.timeline);
  shape.stale = true;
  shape.last_seen = observed_;
  ++shape.times_seen;
  // Forget the oldest shapes beyond what is worth following.
  while (shapes_.size() > 2 * kMaxAlternatives) {
    auto oldest = std::min_element(shapes_.begin(), shapes_.end(),
                                   [](auto& a, auto& b) { return a.second.last_seen < b.second.last_seen; });
    shapes_.erase(oldest);
  }
}

const StepTimeline* PlannerPolicy::last_timeline() const {
  auto it = shapes_.find(last_signature_);
  return it == shapes_.end() ? nullptr : &it->second.timeline;
}

double PlannerPolicy::lead_ns(std::uint32_t ordinal) const {
  auto it = shapes_.find(last_signature_);
  return it == shapes_.end() ? 0 : it->second.leads.at(ordinal);
}

}  // namespace tierrt::policy
