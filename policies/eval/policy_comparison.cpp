#include "policies/eval/policy_comparison.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "baseline_policies.hpp"
#include "recompute_policies.hpp"
#include "replay.hpp"
#include "tierrt_policy.hpp"
#include "policies/lifetime_classifier.hpp"

namespace tierrt::policy {

namespace {
// step / reference - 1; a step of no time against no time costs nothing, and
// anything against no time has no ratio (NaN, printed as n/a).
double overhead(double step_ns, double reference_ns) {
  if (reference_ns > 0) return step_ns / reference_ns - 1;
  return step_ns > 0 ? std::numeric_limits<double>::quiet_NaN() : 0.0;
}

bool has_roles(const StepTimeline& tl) {
  return std::any_of(tl.blocks.begin(), tl.blocks.end(), [](const BlockRecord& b) { return b.role != Role::Unknown; });
}

PolicyFigures run_one(const std::vector<StepTimeline>& steps, Policy& p, const LinkModel& link, std::uint64_t budget,
                      bool record, const Comparison& c) {
  ReplayRun run = replay(steps, p, ReplayOptions{budget, link, record});
  PolicyFigures f;
  f.name = run.policy;
  f.first = run.steps.front();
  f.steady = std::move(run.steps.back());
  f.overhead_vs_none = overhead(f.steady.step_ns, c.compute_ns);
  f.overhead_vs_bound = c.bound.feasible ? overhead(f.steady.step_ns, c.bound.step_ns()) : 0;
  const auto share = [&](std::uint64_t bytes) {
    return c.activation_bytes == 0 ? 0 : static_cast<double>(bytes) / static_cast<double>(c.activation_bytes);
  };
  f.activation_off = share(f.steady.spilled_activation_bytes);
  f.activation_recomputed = share(run.recomputed_activation_bytes);
  f.recompute_ns = run.recompute_ns;
  f.stream_copy_ns = run.stream_copy_ns;
  f.recomputes = run.recomputed_activation_bytes > 0 || run.recompute_ns > 0;
  return f;
}

}  // namespace

std::vector<std::string> policy_names() {
  return {"none", "lru", "vdnn", "te", "jax", "save_on_cpu", "checkpoint", "tierrt"};
}

std::unique_ptr<Policy> make_policy(std::string_view name, bool spill_all) {
  if (name == "none") return std::make_unique<NoOffloadPolicy>();
  if (name == "lru") return std::make_unique<ReactiveLruPolicy>();
  if (name == "vdnn") return std::make_unique<VdnnPolicy>();
  if (name == "te") return std::make_unique<TransformerEnginePolicy>();
  if (name == "jax") return std::make_unique<JaxRematOffloadPolicy>();
  if (name == "save_on_cpu") return std::make_unique<SaveOnCpuPolicy>();
  if (name == "checkpoint") return std::make_unique<CheckpointPolicy>();
  if (name == "tierrt") {
    PlannerOptions o;
    o.spill_all = spill_all;
    return std::make_unique<TierrtPolicy>(o);
  }
  throw std::invalid_argument("unknown policy '" + std::string(name) + "': expected none, lru, vdnn, te, jax, save_on_cpu, checkpoint or tierrt");
}

Comparison compare_policies(const std::vector<StepTimeline>& steps, const std::vector<std::string>& names,
                            const LinkModel& link, const BudgetChoice& choice, bool record,
                            std::vector<std::string>* skipped) {
  if (steps.empty()) throw std::invalid_argument("no training step found in the trace");
  Comparison c;
  const StepTimeline& last = steps.back();
  c.compute_ns = static_cast<double>(last.compute_ns());
  const auto profile = last.resident_profile();
  const auto peak_it = std::max_element(profile.begin(), profile.end());
  c.peak_without_offload = peak_it == profile.end() ? 0 : *peak_it;
  const auto peak_op = static_cast<std::uint32_t>(peak_it - profile.begin());
  for (const BlockRecord& b : last.blocks) {
    if (b.cls != LifetimeClass::Activation) continue;
    c.activation_bytes += b.bytes;
    const std::uint32_t end = b.free_op == kNever ? static_cast<std::uint32_t>(last.ops.size()) : b.free_op;
    if (b.alloc_op <= peak_op && peak_op < end) c.activation_bytes_at_peak += b.bytes;
  }

  std::optional<PolicyFigures> all_off;
  if (choice.bytes) {
    c.budget = *choice.bytes;
  } else if (choice.offload_all) {
    auto p = make_policy("tierrt", true);
    c.bound = LowerBound{c.compute_ns, 0, true};
    all_off = run_one(steps, *p, link, std::numeric_limits<std::uint64_t>::max(), record, c);
    c.budget = all_off->steady.peak_bytes;
    c.offload_all_activation_off = all_off->activation_off;
  } else {
    c.budget = c.peak_without_offload -
               static_cast<std::uint64_t>(choice.offload_fraction * static_cast<double>(c.activation_bytes_at_peak));
  }
  c.bound = lower_bound(last, c.budget, link);

  const bool roles = has_roles(last);
  for (const std::string& name : names) {
    if (name == "tierrt" && all_off) {
      all_off->overhead_vs_bound = overhead(all_off->steady.step_ns, c.bound.step_ns());
      c.policies.push_back(*all_off);
      continue;
    }
    auto p = make_policy(name, choice.offload_all);
    if (p->needs_roles() && !roles) {
      if (skipped) skipped->push_back(name + ": needs tensor names, the trace has none");
      continue;
    }
    c.policies.push_back(run_one(steps, *p, link, c.budget, record, c));
  }
  return c;
}

}  // namespace tierrt::policy
