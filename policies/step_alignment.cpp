#include "policies/step_alignment.hpp"

#include <algorithm>
#include <unordered_map>

namespace tierrt::policy {

StepAligner::StepAligner(std::span<const std::uint64_t> tokens, std::span<const std::uint32_t> ordinals,
                         const AlignOptions& options)
    : tokens_(tokens), ordinals_(ordinals), o_(options), taken_(tokens.size(), 0), op_of_token_(tokens.size(), 0) {
  std::uint32_t launches = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    op_of_token_[i] = launches;
    if (i < ordinals.size() && ordinals[i] == kLaunchToken) ++launches;
  }
}

std::uint32_t StepAligner::find(std::uint64_t hash, std::uint32_t want_ordinal, bool by_role) const {
  const std::uint32_t n = static_cast<std::uint32_t>(tokens_.size());
  const std::uint32_t begin = frontier_ > o_.look_back ? frontier_ - o_.look_back : 0;
  const std::uint32_t end = static_cast<std::uint32_t>(std::min<std::uint64_t>(n, std::uint64_t{frontier_} + o_.look_ahead));
  for (std::uint32_t j = begin; j < end; ++j) {
    if (taken_[j] || tokens_[j] != hash) continue;
    if (by_role && ordinals_[j] != want_ordinal) continue;
    return j;
  }
  return kNoMatch;
}

std::uint32_t StepAligner::lookup(std::uint64_t hash, std::uint32_t ordinal) const {
  const bool is_free = ordinal != kLaunchToken && (ordinal & kFreeToken) != 0;
  if (!is_free) return find(hash, 0, false);
  if (ordinal == kNoOrdinal) return find(hash, kNoOrdinal, true);  // a block from before the step
  const std::uint32_t learned = learned_ordinal(ordinal & ~kFreeToken);
  return learned == kNoOrdinal ? kNoMatch : find(hash, learned | kFreeToken, true);
}

std::uint32_t StepAligner::feed(std::uint64_t hash, std::uint32_t ordinal) {
  if (lost_) return kNoMatch;
  const std::uint32_t j = lookup(hash, ordinal);
  const bool is_free = ordinal != kLaunchToken && (ordinal & kFreeToken) != 0;
  if (!is_free && ordinal != kLaunchToken) {  // an allocation: its block stands for the learned one
    if (learned_of_.size() <= ordinal) learned_of_.resize(ordinal + 1, kNoOrdinal);
    if (j != kNoMatch) {
      const std::uint32_t learned = ordinals_[j];
      learned_of_[ordinal] = learned;
      if (running_of_.size() <= learned) running_of_.resize(learned + 1, kNoOrdinal);
      running_of_[learned] = ordinal;
    }
  }
  // A followed block freed where the learned step still had it: not this step.
  if (is_free && ordinal != kNoOrdinal && j == kNoMatch && learned_ordinal(ordinal & ~kFreeToken) != kNoOrdinal &&
      ++role_misses_ > o_.max_role_misses)
    lost_ = true;
  if (j == kNoMatch) {
    if (++unmatched_run_ > o_.max_unmatched_run) lost_ = true;
    return kNoMatch;
  }
  taken_[j] = 1;
  ++matched_;
  unmatched_run_ = 0;
  frontier_ = std::max(frontier_, j + 1);
  return j;
}

std::optional<AlignedPlan> align_plan(const StepPlan& plan, const StepTimeline& running, const AlignOptions& options) {
  if (plan.expected_tokens.empty() || plan.expected_ordinals.size() != plan.expected_tokens.size() ||
      running.token_ordinals.size() != running.tokens.size() || running.token_op.size() != running.tokens.size())
    return std::nullopt;
  StepAligner aligner(plan.expected_tokens, plan.expected_ordinals, options);
  std::vector<Trigger> out;
  // A block from before the step is the same block in the running step:
  // found by its id, in a table made at the first trigger that names one
  // (every block that lived through the step is in it, 1e5 in some jobs,
  // and most plans name none).
  std::unordered_map<BlockId, std::uint32_t> before;
  bool before_made = false;
  auto running_name = [&](const Trigger& t) {
    if (t.block == 0) return aligner.running_ordinal(t.ordinal);
    if (!before_made) {
      before_made = true;
      for (std::uint32_t b = 0; b < running.blocks.size(); ++b)
        if (running.blocks[b].predates_step()) before.emplace(running.blocks[b].id, b);
    }
    const auto it = before.find(t.block);
    return it == before.end() ? kNoOrdinal : running.name_of(it->second);
  };
  AlignedPlan r;
  r.plan_ops = static_cast<std::uint32_t>(running.ops.size());
  std::uint32_t fired = 0;  // learned launches whose triggers have fired
  const TriggerTable& table = plan.triggers;
  for (std::size_t i = 0; i < running.tokens.size(); ++i) {
    const std::uint32_t ord = running.token_ordinals[i];
    const std::uint32_t m = aligner.feed(running.tokens[i], ord);
    if (aligner.lost()) {
      r.plan_ops = running.token_op[i];
      break;
    }
    if (m == kNoMatch || ord != kLaunchToken) continue;
    const std::uint32_t op = running.token_op[i];
    const std::uint32_t learned_op = aligner.learned_op(m);
    for (; fired <= learned_op && fired < table.op_count(); ++fired)
      for (const Trigger& t : table.at(fired)) {
        const std::uint32_t block = running_name(t);
        if (block == kNoOrdinal) continue;  // the block it names has not turned up
        out.push_back({op, t.action, block, t.action == Action::Spill ? op : 0, t.block});
      }
  }
  r.matched_tokens = aligner.matched();
  r.triggers = TriggerTable(std::move(out), static_cast<std::uint32_t>(running.ops.size()));
  return r;
}

}  // namespace tierrt::policy
