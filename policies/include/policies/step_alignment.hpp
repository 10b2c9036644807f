// Following a learned step through a running one that differs in detail: extra
// short-lived allocations, independent launches in another order, other timings.
// Each running token is matched, as it arrives, to a learned token of the same
// hash near where the learned step has got to (a bounded look-back for launches
// that came late, a bounded look-ahead for ones that came early), earliest
// first, so that a layer's tokens never stand for another layer's. A block is
// followed by its role: its allocation matched to the learned allocation it
// stands for, its free only to that block's learned free. Tokens that match
// nothing are extras and change nothing; the plan is given up (the alignment is
// lost) when too many running tokens in a row match nothing or blocks are freed
// where the learned step still had them (an eval step, a changed shape).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "policies/step_timeline.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt::policy {

struct AlignOptions {
  std::uint32_t look_back = 48;       // learned tokens behind the furthest match still open to a late token
  std::uint32_t look_ahead = 256;     // learned tokens beyond it open to an early one (or past learned extras)
  std::uint32_t max_unmatched_run = 128;  // running tokens in a row that match nothing before it is lost
  std::uint32_t max_role_misses = 2;  // frees of followed blocks the learned step did not have there
};

inline constexpr std::uint32_t kNoMatch = 0xffffffffu;

class StepAligner {
 public:
  // `tokens` and `ordinals` (see StepTimeline::token_ordinals) of the learned step;
  // both must outlive the aligner.
  StepAligner(std::span<const std::uint64_t> tokens, std::span<const std::uint32_t> ordinals,
              const AlignOptions& options = {});

  // The running step's next token with its ordinal entry. Returns the learned
  // token it stands for, or kNoMatch (an extra, or the alignment is lost).
  std::uint32_t feed(std::uint64_t hash, std::uint32_t ordinal);

  // Whether feed() would match this token to a learned one (nothing changes).
  bool would_match(std::uint64_t hash, std::uint32_t ordinal) const { return !lost_ && lookup(hash, ordinal) != kNoMatch; }
  bool lost() const { return lost_; }
  std::uint32_t matched() const { return matched_; }
  // The learned ordinal a running block stands for (kNoOrdinal: none).
  std::uint32_t learned_ordinal(std::uint32_t running_ordinal) const {
    return running_ordinal < learned_of_.size() ? learned_of_[running_ordinal] : kNoOrdinal;
  }
  // The other way round: the running block that stands for learned block
  // `learned_ordinal` (kNoOrdinal: none has turned up yet).
  std::uint32_t running_ordinal(std::uint32_t learned_ordinal) const {
    return learned_ordinal < running_of_.size() ? running_of_[learned_ordinal] : kNoOrdinal;
  }
  // The learned launch index of learned token `token` (a launch token).
  std::uint32_t learned_op(std::uint32_t token) const { return op_of_token_[token]; }

 private:
  std::uint32_t find(std::uint64_t hash, std::uint32_t want_ordinal, bool by_role) const;
  std::uint32_t lookup(std::uint64_t hash, std::uint32_t ordinal) const;

  std::span<const std::uint64_t> tokens_;
  std::span<const std::uint32_t> ordinals_;
  AlignOptions o_;
  std::vector<std::uint8_t> taken_;
  std::vector<std::uint32_t> op_of_token_;  // per learned token: launches before it (its own index for a launch)
  std::vector<std::uint32_t> learned_of_;   // running ordinal -> learned ordinal
  std::vector<std::uint32_t> running_of_;   // learned ordinal -> running ordinal
  std::uint32_t running_allocs_ = 0;
  std::uint32_t frontier_ = 0;  // one past the furthest learned token matched
  std::uint32_t unmatched_run_ = 0, role_misses_ = 0, matched_ = 0;
  bool lost_ = false;
};

// A plan moved onto the running step: its triggers keyed by the running step's
// launches and naming the running step's blocks. A learned launch's triggers
// fire at the first running launch by which the alignment has reached it; a
// spill is released once that launch is done.
struct AlignedPlan {
  TriggerTable triggers;
  std::uint32_t plan_ops = 0;  // running launches issued before the alignment was lost (all: never lost)
  std::uint32_t matched_tokens = 0;
};

// Null when the plan or the running step lacks what alignment needs (ordinals
// per token): the caller then follows the plan only as far as the tokens agree.
std::optional<AlignedPlan> align_plan(const StepPlan& plan, const StepTimeline& running,
                                      const AlignOptions& options = {});

}  // namespace tierrt::policy
