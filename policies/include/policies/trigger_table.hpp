// The plan as the launch path consumes it: triggers keyed by launch index within the
// step, looked up in O(1). The launch hook never plans; it reads this table.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tierrt::policy {

enum class Action : std::uint8_t {
  Spill,       // after launch `op`, copy the block to the host; release it once launch `release_after` is done
  Prefetch,    // when launch `op` is issued, start bringing the block back
  AwaitSpill,  // launch `op` waits until the block's spill has completed (synchronous offload baselines)
  // When launch `op` is issued, bring the block back if it is off the device
  // though no spill of the plan's took it there: a granule-group member the
  // device had no room for when its group was first named starts on the
  // host. Traffic only where that happened, so no copy the plan counts on.
  Refetch,
};

struct Trigger {
  std::uint32_t op = 0;
  Action action = Action::Spill;
  std::uint32_t ordinal = 0;        // the block, by allocation order within the step
  std::uint32_t release_after = 0;  // Spill only: last launch that still reads the device copy
  // A block from before the step (ordinal has kBeforeStep set), by its id:
  // the same block in every step. 0 for a block the step allocates.
  std::uint64_t block = 0;

  friend bool operator==(const Trigger&, const Trigger&) = default;
};

class TriggerTable {
 public:
  TriggerTable() = default;
  TriggerTable(std::vector<Trigger> triggers, std::uint32_t op_count);

  std::span<const Trigger> at(std::uint32_t op) const;
  // Those of launches first_op..last_op together (empty when last_op < first_op):
  // a follower whose position jumped over launches still owes their triggers.
  std::span<const Trigger> between(std::uint32_t first_op, std::uint32_t last_op) const;
  const std::vector<Trigger>& all() const { return triggers_; }
  std::uint32_t op_count() const { return static_cast<std::uint32_t>(first_.empty() ? 0 : first_.size() - 1); }

 private:
  std::vector<Trigger> triggers_;     // sorted by op
  std::vector<std::uint32_t> first_;  // first_[op] .. first_[op+1]
};

// What a policy hands over for one step. `expected_tokens` names the step the
// triggers were computed for, `expected_ordinals` what each of its tokens is
// about (StepTimeline::token_ordinals): with both, the follower aligns the
// running step to it (step_alignment.hpp); with tokens alone it stops using the
// table at the first token that differs. No tokens means the triggers come from
// the step itself (baselines that model framework-integrated offload).
struct StepPlan {
  std::vector<std::uint64_t> expected_tokens;
  TriggerTable triggers;
  std::vector<std::uint32_t> expected_ordinals;
};

}  // namespace tierrt::policy
