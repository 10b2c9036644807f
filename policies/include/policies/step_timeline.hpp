// One step as the planner sees it: the launches in order with their measured
// durations, and every block live during the step with its allocation point, free
// point and uses (launch indices within the step).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "policies/event.hpp"
#include "policies/lifetime_class.hpp"
#include "policies/step_detector.hpp"

namespace tierrt::policy {

inline constexpr std::uint32_t kNoOrdinal = 0xffffffffu;
inline constexpr std::uint32_t kNever = 0xffffffffu;
// StepTimeline::token_ordinals: a launch's token, and the bit that marks a
// free's token (an allocation's token holds its block's ordinal alone).
inline constexpr std::uint32_t kLaunchToken = 0xfffffffeu;
inline constexpr std::uint32_t kFreeToken = 0x80000000u;
// Trigger::ordinal of a block from before the step (a granule of a pool the
// framework allocated once): this bit and the block's index in the timeline
// the plan was made from; the follower finds it by Trigger::block, its id,
// which is the same in every step.
inline constexpr std::uint32_t kBeforeStep = 0x80000000u;

struct OpRecord {
  std::uint64_t seq = 0;          // the launch sequence number it had in the trace
  std::uint64_t duration_ns = 0;  // measured time until the next launch
  std::uint32_t uses_begin = 0, uses_end = 0;  // into StepTimeline::op_uses
};

struct BlockRecord {
  BlockId id = 0;
  std::uint64_t bytes = 0;
  std::uint32_t ordinal = kNoOrdinal;  // allocation order within the step; kNoOrdinal if it predates the step
  std::uint32_t alloc_op = 0;          // first launch that can see it (0 for blocks that predate the step)
  std::uint32_t free_op = kNever;      // first launch after its free (kNever: it outlives the step)
  std::uint32_t uses_begin = 0, uses_end = 0;  // into StepTimeline::block_uses, ascending launch indices
  Role role = Role::Unknown;           // from Tag events, only for ground truth and named baselines
  std::uint32_t layer = kNoLayer;
  LifetimeClass cls = LifetimeClass::Transient;
  bool lazy = false;  // no memory until used, on the host where the device is full (kAllocLazy)

  bool predates_step() const { return ordinal == kNoOrdinal; }
  std::uint32_t use_count() const { return uses_end - uses_begin; }
};

struct StepTimeline {
  std::vector<OpRecord> ops;
  std::vector<BlockRecord> blocks;
  std::vector<std::uint32_t> op_uses;     // block indices, grouped per op
  std::vector<std::uint32_t> block_uses;  // op indices, grouped per block
  std::vector<std::uint32_t> by_ordinal;  // ordinal -> block index
  std::vector<std::uint64_t> tokens;      // what a plan made from this step checks the next one against
  std::vector<std::uint32_t> token_op;    // per token: launches issued before it
  // Per token: kLaunchToken, the ordinal of the block an allocation makes, or that
  // of the block a free ends with kFreeToken set (kNoOrdinal: a block from before
  // the step). Empty when not known (the follower then matches tokens exactly).
  std::vector<std::uint32_t> token_ordinals;
  std::uint64_t signature = 0;
  std::vector<std::uint32_t> backward_begins;  // first launch after each Phase(Backward) marker
  double measured_d2h_bps = 0, measured_h2d_bps = 0;  // from CopyRate events; 0 when none

  std::span<const std::uint32_t> uses_of(std::uint32_t block) const {
    return {block_uses.data() + blocks[block].uses_begin, blocks[block].uses_end - blocks[block].uses_begin};
  }
  std::span<const std::uint32_t> blocks_of(std::uint32_t op) const {
    return {op_uses.data() + ops[op].uses_begin, ops[op].uses_end - ops[op].uses_begin};
  }
  std::uint64_t compute_ns() const;
  // What a trigger calls block `b` (its ordinal, or kBeforeStep and its
  // index), and the block a trigger's ordinal names (kNever: none here).
  std::uint32_t name_of(std::uint32_t b) const {
    return blocks[b].predates_step() ? (kBeforeStep | b) : blocks[b].ordinal;
  }
  std::uint32_t block_named(std::uint32_t ordinal) const {
    if (ordinal != kNoOrdinal && (ordinal & kBeforeStep) != 0) {
      const std::uint32_t b = ordinal & ~kBeforeStep;
      return b < blocks.size() && blocks[b].predates_step() ? b : kNever;
    }
    return ordinal < by_ordinal.size() ? by_ordinal[ordinal] : kNever;
  }
  // Launches a follower lets through when the step matches `expected` only up to
  // their common token prefix.
  std::uint32_t ops_matching(const std::vector<std::uint64_t>& expected) const;
  // Device bytes during each launch if nothing were ever moved.
  std::vector<std::uint64_t> resident_profile() const;
};

// Blocks live at a point of the stream, with what Tag events said about them.
struct LiveBlock {
  std::uint64_t bytes = 0;
  Role role = Role::Unknown;
  std::uint32_t layer = kNoLayer;
  bool lazy = false;  // kAllocLazy
};
using LiveBlocks = std::unordered_map<BlockId, LiveBlock>;

void track_live(LiveBlocks& live, const Event& e);

// One step from its events, given what was live when it began; `live` ends up as
// what is live after the step. Tokens and signature are the caller's to fill.
StepTimeline build_timeline(std::span<const Event> events, LiveBlocks& live);

// For each token (by the index of its event within `events`), the launches before it.
std::vector<std::uint32_t> launches_before(std::span<const Event> events, std::span<const std::uint32_t> token_events);

// For each token (by the index of its event within `events`), what it is about
// (see StepTimeline::token_ordinals).
std::vector<std::uint32_t> token_ordinals(std::span<const Event> events, std::span<const std::uint32_t> token_events);

// The timeline of one step the detector found in `events`, with the step's tokens,
// where each token falls among its launches, and its signature. `live` as for
// build_timeline: what was live when the step began, then what is live after it.
StepTimeline span_timeline(std::span<const Event> events, const StepDetection& steps, const StepSpan& span,
                           LiveBlocks& live);

}  // namespace tierrt::policy
