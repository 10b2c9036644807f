// The policy engine as the runtime drives it: every event goes in through record();
// the launch path asks triggers_ahead() and gets a precomputed slice of the trigger
// table (O(1), no planning); the mover reports late and demanded fetches. Learning
// and planning happen when a step ends (at a Step marker, or where the learned
// step's token sequence completes), never inside a launch.
//
// A plan is followed by alignment (step_alignment.hpp), as the step model
// follows it: each running token is matched to the learned one it stands for,
// a learned launch's triggers are handed out once the aligned position reaches
// it, and they name the running block that stands for the learned one. Extra
// temporaries, reordered launches and other timings leave the plan in force;
// an alignment that is lost (an eval step, a changed shape) drops it. Without
// markers the step's end is found the same way, against the learned step.
//
// Until a step has been learned, and in any step whose alignment with every
// learned one is lost, the engine hands out no triggers: the runtime's safe
// reactive path (spill the coldest step-local block when over budget, fetch on
// demand) is in charge.
//
// Not thread-safe: the runtime serialises calls. record() appends and follows in
// bounded time per event (each alternative's aligner scans a window of a few
// hundred learned tokens), except at a step end (learning and planning, milliseconds) and,
// without markers, while the first period is being looked for.

#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "policies/event.hpp"
#include "policies/event_buffer.hpp"
#include "policies/link_model.hpp"
#include "policies/planner_policy.hpp"
#include "policies/step_alignment.hpp"
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
    // A step is learned from the events it buffers (each launch, each block
    // it names, each allocation and free: 24 bytes each, and a token per
    // launch). A step longer than this is not learned: its events are let go
    // and, until the next step begins, the reactive path is in charge. Without
    // it a job that stops marking steps, or whose launches never repeat, would
    // grow the buffer for as long as it runs.
    std::size_t max_step_events = std::size_t{1} << 22;
  };

  explicit PolicyEngine(Options options);

  void record(const Event& e);

  // Triggers for the launch `ahead` launches after the next one to be issued in the
  // current step (0: the next one, whose index is the number of launches recorded
  // since the step began); a caller that learns of launches after they were issued
  // looks further ahead. They are the plan's triggers for the learned launches the
  // aligned position has reached (for ahead 0 also any it jumped over since the
  // last launch was recorded), with `op` the running launch and `ordinal` the
  // running block that stands for the learned one (a block from before the step:
  // `block`, its id, and no ordinal); a trigger whose block has not turned up is
  // left out. The span stays valid until the next call with the
  // same `ahead == 0`-ness or the next record().
  std::span<const Trigger> triggers_ahead(std::uint32_t ahead) const;
  // Those of the launches `first` (at least 1) to `last` ahead together, in
  // launch order, each as triggers_ahead gives it (its `op`, less
  // launches_in_step(), says how far ahead): one lookup where a caller
  // arming many launches ahead would ask for each. Valid as
  // triggers_ahead(first)'s span.
  std::span<const Trigger> triggers_ahead(std::uint32_t first, std::uint32_t last) const;
  // Launches recorded since the step began: the `op` of the next one.
  std::uint32_t launches_in_step() const { return launches_; }
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

  bool following_plan() const { return followed_ != kNotFollowing; }
  // Whether a plan this step follows, or may switch to, still has a trigger
  // the launches have not been handed (what the policy thread must act on
  // promptly; with none it can take launches in larger batches). O(plans).
  bool moves_ahead() const;
  std::size_t steps_completed() const { return steps_completed_; }
  // Whether the application marks its steps (tierrt_mark_step): else they are found.
  bool steps_marked() const { return markers_seen_; }
  const PlannerPolicy& planner() const { return planner_; }
  // Steps let go for being longer than Options::max_step_events, and the
  // events the current step holds (never more than that).
  std::size_t overlong_steps() const { return overlong_steps_; }
  std::size_t buffered_events() const { return events_.size(); }
  std::size_t max_step_events() const { return options_.max_step_events; }

 private:
  void on_token(const Token& t);
  void align(const Token& t);  // follow the plans and the learned step one token further
  std::uint32_t token_ordinal(const Token& t) const;  // see StepTimeline::token_ordinals
  std::uint32_t position() const;  // the learned launch the next running launch stands for
  void restart_from(std::size_t split_event, std::size_t split_token);
  void close_step(std::size_t end_event);
  // `plan`: false where the step begins in the middle of what ran (after an
  // overlong one was let go), where a plan aligned from there could hand out
  // another part's triggers.
  void begin_step(bool plan = true);
  void try_detect_steps();
  void let_go_of_overlong_step();
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
  EventBuffer events_;                        // since the step began
  std::vector<Token> tokens_;                 // its tokens, event indices relative to events_
  std::uint32_t launches_ = 0;
  std::vector<BlockId> by_ordinal_;
  std::unordered_map<BlockId, std::uint32_t> ordinal_by_block_;
  std::vector<StepPlan> plans_;               // alternatives offered for this step
  // Per alternative: its alignment with this step, and one past the furthest
  // learned launch it matched.
  struct Follower {
    StepAligner aligner;
    std::uint32_t reached = 0;
  };
  std::vector<Follower> followers_;
  std::vector<std::size_t> candidates_;       // alternatives whose alignment holds
  static constexpr std::size_t kNotFollowing = static_cast<std::size_t>(-1);
  std::size_t followed_ = kNotFollowing;      // the first of them
  std::uint32_t handed_ = 0;                  // first learned launch of it whose triggers were not handed out
  std::uint32_t launch_tokens_ = 0;           // launches of this step whose tokens are complete
  mutable std::vector<Trigger> now_, next_;   // what triggers_ahead() hands out (0, and further ahead)
  // `t` as the running launch `op` and the running block name it, into `out`;
  // nothing when that block has not turned up.
  void add_running(const Trigger& t, std::uint32_t op, std::vector<Trigger>& out) const;
  std::vector<std::pair<std::uint32_t, double>> late_;
  std::vector<std::uint32_t> demanded_;
  std::size_t steps_completed_ = 0;
  std::vector<std::uint64_t> reference_;      // the learned step the markerless boundary follows
  std::vector<std::uint32_t> reference_ordinals_;
  std::optional<StepAligner> reference_aligner_;  // this step against reference_
  bool reference_done_ = false;               // its last token was matched: the next start of one ends the step
  bool on_reference_ = true;                  // the current step's alignment with reference_ holds
  std::size_t next_detect_ = 1024;            // buffer size at which to look for a period again
  std::size_t step_events_ = 0;               // events in the last step that followed the reference
  std::size_t rebased_ = 0;                   // events dropped from the front of events_ so far
  std::size_t overlong_steps_ = 0;
};

}  // namespace tierrt::policy
