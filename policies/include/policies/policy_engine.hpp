// The policy engine as the runtime drives it: every event goes in through record();
// the launch path asks triggers_ahead() and gets a precomputed slice of the trigger
// table (O(1), no planning); the mover reports late and demanded fetches. Learning
// and planning happen when a step ends (at a Step marker, or where the learned
// step's token sequence completes), never inside a launch.
//
// Until a step has been learned, and in any step that deviates from every learned
// one, the engine hands out no triggers: the runtime's safe reactive path (spill
// the coldest step-local block when over budget, fetch on demand) is in charge.
//
// Not thread-safe: the runtime serialises calls. record() appends and follows in
// O(1) amortised, except at a step end (learning and planning, milliseconds) and,
// without markers, while the first period is being looked for.

#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "policies/event.hpp"
#include "policies/link_model.hpp"
#include "policies/planner_policy.hpp"
#include "policies/step_detector.hpp"
#include "policies/step_timeline.hpp"
#include "policies/step_tokens.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt::policy {

class PolicyEngine {
 public:
  struct Options {
    std::uint64_t budget = 0;
    LinkModel link;
    PlannerOptions planner;
  };

  explicit PolicyEngine(Options options);

  void record(const Event& e);

  // Triggers for the launch `ahead` launches after the next one to be issued in the
  // current step (0: the next one, whose index is the number of launches recorded
  // since the step began); a caller that learns of launches after they were issued
  // looks further ahead.
  std::span<const Trigger> triggers_ahead(std::uint32_t ahead) const;
  // The block a trigger names: the one allocated `ordinal`-th in the current step.
  std::optional<BlockId> block_of(std::uint32_t ordinal) const;
  // The other way round: the latest ordinal `block` had in the current step.
  std::optional<std::uint32_t> ordinal_of(BlockId block) const;

  // What the mover saw in the current step; it feeds the next plan. A demand
  // fetch counts as a misprediction and as late by the fetch's modeled time.
  void report_late(std::uint32_t ordinal, double late_ns);
  void report_demand_fetch(std::uint32_t ordinal);

  // Durations measured later than the launches were recorded (on the device):
  // launches of the current step with sequence numbers in [from, to) take `ns`
  // each. Returns how many were found.
  std::size_t set_launch_durations(LaunchSeq from, LaunchSeq to, std::uint64_t ns);

  bool following_plan() const { return !candidates_.empty(); }
  std::size_t steps_completed() const { return steps_completed_; }
  const PlannerPolicy& planner() const { return planner_; }

 private:
  void on_token(const Token& t);
  void restart_from(std::size_t split_event, std::size_t split_token);
  void close_step(std::size_t end_event);
  void begin_step();
  void try_detect_steps();
  void append(const Event& e);  // to the current step, with its ordinal and launch count

  Options options_;
  PlannerPolicy planner_;

  Tokenizer tokenizer_;
  std::vector<Token> scratch_;
  LiveBlocks live_at_step_begin_;
  bool markers_seen_ = false;
  bool step_open_ = false;  // a Step marker has opened a step
  bool learned_ = false;  // a step shape is known, so boundaries can be found without markers

  // The current step.
  Trace events_;                              // since the step began
  std::vector<Token> tokens_;                 // its tokens, event indices relative to events_
  std::uint32_t launches_ = 0;
  std::vector<BlockId> by_ordinal_;
  std::unordered_map<BlockId, std::uint32_t> ordinal_by_block_;
  std::vector<StepPlan> plans_;               // alternatives offered for this step
  std::vector<std::size_t> candidates_;       // those still matching what happened
  std::vector<std::pair<std::uint32_t, double>> late_;
  std::vector<std::uint32_t> demanded_;
  std::size_t steps_completed_ = 0;
  std::vector<std::uint64_t> reference_;      // the learned step the markerless boundary follows
  bool on_reference_ = true;                  // the current step matches reference_ so far
  std::size_t next_detect_ = 1024;            // buffer size at which to look for a period again
  std::size_t step_events_ = 0;               // events in the last step that followed the reference
  std::size_t rebased_ = 0;                   // events dropped from the front of events_ so far
};

}  // namespace tierrt::policy
