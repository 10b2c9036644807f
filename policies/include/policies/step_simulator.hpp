// The discrete-event model a step is replayed in: one compute stream running the
// launches in order, one device-to-host and one host-to-device copy engine (FIFO,
// urgent jobs first), and a device capacity. Plans are followed as the runtime would
// follow them; whatever the plan misses is handled reactively (demand fetch, spill
// the victim a VictimChooser names) and counted. All figures are modeled.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "policies/link_model.hpp"
#include "policies/step_timeline.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt::policy {

struct VictimCandidate {
  std::uint32_t block = 0;
  double last_use_ns = 0;  // when it was last touched (its allocation time if never)
};

struct VictimQuery {
  const StepTimeline& timeline;
  std::span<const VictimCandidate> candidates;  // resident, idle now, not already leaving
  std::uint64_t bytes_needed = 0;
  std::uint32_t op = 0;  // the launch waiting for memory
};

class VictimChooser {
 public:
  virtual ~VictimChooser() = default;
  // Append victims, best first; the model takes them until bytes_needed is covered.
  virtual void choose(const VictimQuery& query, std::vector<std::uint32_t>& out) = 0;
};

// The safe reactive choice: the coldest block allocated in this step (an activation
// or a temporary), and only when none is left the coldest of the rest (weights,
// optimizer state) rather than break the budget. Online-valid: it needs nothing but
// allocation order and last-use times.
class SafeReactive : public VictimChooser {
 public:
  void choose(const VictimQuery& query, std::vector<std::uint32_t>& out) override;
};

// What happened, in order, for checkers that re-derive the model's invariants.
struct SimAudit {
  enum class Kind : std::uint8_t {
    OpStart,      // block = launch index; its blocks must all be on the device
    OpEnd,
    SpillStart,   // the D2H copy of `block` begins
    Released,     // device memory of `block` released after its spill
    FetchStart,   // the H2D copy of `block` begins (device memory taken)
    FetchDone,    // `block` is back
    Freed,        // the program freed `block`
  };
  Kind kind;
  std::uint32_t block;
  double time_ns;
  std::uint64_t device_bytes;  // after the event
};

struct SimOptions {
  std::uint64_t budget = std::numeric_limits<std::uint64_t>::max();
  LinkModel link;
  bool record_residency = false;
  std::function<void(const SimAudit&)> audit;  // optional
};

struct SimResult {
  double step_ns = 0, compute_ns = 0, stall_ns = 0;
  std::uint64_t peak_bytes = 0;
  std::uint64_t over_budget_bytes = 0;  // worst excess over the budget (0: the budget held)
  std::uint64_t bytes_d2h = 0, bytes_h2d = 0;
  std::uint64_t spilled_activation_bytes = 0;  // distinct activation bytes that reached the host
  std::uint32_t prefetch_hits = 0, late_prefetches = 0, demand_fetches = 0;
  std::uint32_t pressure_spills = 0;   // spills the plan did not ask for
  std::uint32_t aborted_spills = 0;    // spills overtaken by an unplanned use
  std::uint32_t plan_ops = 0;          // launches the plan covered before the step deviated
  int plan_alternative = -1;           // which StepPlan was followed (-1: none)
  std::vector<std::pair<double, std::uint64_t>> residency;  // (time ns, device bytes), when recorded
  std::vector<double> late_ns;         // per block: time the compute stream waited for it
  std::vector<std::uint8_t> demanded;  // per block: 1 if it was fetched on demand
  // When each launch started, then when the step ended: the timeline whose windows
  // between launches the copies of a plan must fit (link_schedule.hpp).
  std::vector<double> launch_start_ns;

  // Fraction of fetches that were complete when the launch needed them; -1 when nothing was fetched.
  double prefetch_hit_rate() const;
};

SimResult simulate_step(const StepTimeline& tl, std::span<const StepPlan> plans, VictimChooser& victims,
                        const SimOptions& options);

}  // namespace tierrt::policy
