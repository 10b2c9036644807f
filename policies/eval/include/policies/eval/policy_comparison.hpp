// Running several policies over the same steps at the same budget and collecting the
// figures tierrt-replay reports (all modeled): the shared core of the replay tool,
// the benchmarks and the acceptance tests.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policies/eval/lower_bound.hpp"
#include "policies/eval/policy.hpp"
#include "policies/link_model.hpp"
#include "policies/step_simulator.hpp"
#include "policies/step_timeline.hpp"

namespace tierrt::policy {

// none, lru, vdnn, te, jax, save_on_cpu, checkpoint, tierrt. `spill_all` makes
// tierrt spill every activation whose idle gap allows it.
std::unique_ptr<Policy> make_policy(std::string_view name, bool spill_all = false);
std::vector<std::string> policy_names();

struct BudgetChoice {
  std::optional<std::uint64_t> bytes;  // an absolute device budget
  double offload_fraction = 0.5;       // else: peak without offload minus this share of activation bytes at the peak
  bool offload_all = false;            // else: tierrt spills every activation it can; the budget is the peak it reaches
};

struct PolicyFigures {
  std::string name;
  SimResult steady;             // the last step (after learning)
  SimResult first;              // the first step (learning, for tierrt)
  double overhead_vs_none = 0;  // steady step time / no-offload step time - 1
  double overhead_vs_bound = 0; // steady step time / lower-bound step time - 1
  double activation_off = 0;    // share of the step's activation bytes that reached the host
  double activation_recomputed = 0;  // share of the step's activation bytes made again in backward
  double recompute_ns = 0;           // time of the launches a recomputing policy added (in steady.step_ns)
  double stream_copy_ns = 0;         // time of copies queued on the compute stream (in steady.step_ns)
  bool recomputes = false;           // runs a different step than the recorded one (the bound does not apply)
};

struct Comparison {
  std::uint64_t budget = 0;
  std::uint64_t peak_without_offload = 0;
  std::uint64_t activation_bytes_at_peak = 0;
  std::uint64_t activation_bytes = 0;
  double compute_ns = 0;
  LowerBound bound;
  // --offload-all: the share of activation bytes tierrt actually moved at the peak
  // it reached (the budget's label says it, not "every activation").
  std::optional<double> offload_all_activation_off;
  std::vector<PolicyFigures> policies;
};

// `steps` must be classified; figures are for the last step. Policies that need
// tensor roles are skipped (with a note in `skipped`) when the trace has none.
Comparison compare_policies(const std::vector<StepTimeline>& steps, const std::vector<std::string>& names,
                            const LinkModel& link, const BudgetChoice& budget, bool record_residency,
                            std::vector<std::string>* skipped = nullptr);

}  // namespace tierrt::policy
