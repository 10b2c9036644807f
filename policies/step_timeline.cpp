#include "policies/step_timeline.hpp"

#include <algorithm>
#include <unordered_map>

namespace tierrt::policy {
namespace {

// Accumulates one step; the block table is shared across steps so that blocks that
// predate a step are known with their sizes.
class TimelineBuilder {
 public:
  TimelineBuilder(LiveBlocks& live) : live_(live) {
    // Sorted so that block indices do not depend on hash-table order.
    before_.reserve(live_.size());
    for (auto& entry : live_) before_.push_back(entry.first);
    std::sort(before_.begin(), before_.end());
    for (BlockId id : before_) add_block(id, live_.at(id), kNoOrdinal);
  }

  void feed(const Event& e) {
    switch (e.kind) {
      case EventKind::Alloc: {
        LiveBlock b{e.b, Role::Unknown, kNoLayer, (e.sub & kAllocLazy) != 0};
        live_[e.a] = b;
        add_block(e.a, b, next_ordinal_++);
        break;
      }
      case EventKind::Free: {
        const std::uint32_t i = index_of(e.a);
        if (i != kNone && tl_.blocks[i].free_op == kNever)
          tl_.blocks[i].free_op = static_cast<std::uint32_t>(tl_.ops.size());
        live_.erase(e.a);
        break;
      }
      case EventKind::Tag: {
        if (const std::uint32_t i = index_of(e.a); i != kNone) {
          tl_.blocks[i].role = static_cast<Role>(e.sub);
          tl_.blocks[i].layer = static_cast<std::uint32_t>(e.b);
        }
        auto lit = live_.find(e.a);
        if (lit != live_.end()) lit->second.role = static_cast<Role>(e.sub), lit->second.layer = static_cast<std::uint32_t>(e.b);
        break;
      }
      case EventKind::Launch:
        op_of_seq_[e.a] = static_cast<std::uint32_t>(tl_.ops.size());
        tl_.ops.push_back(OpRecord{e.a, e.b, 0, 0});
        break;
      case EventKind::Use: {
        auto op = op_of_seq_.find(e.b);
        const std::uint32_t blk = index_of(e.a);
        if (op == op_of_seq_.end() || blk == kNone) break;  // untracked memory or a foreign launch
        uses_.emplace_back(op->second, blk);
        break;
      }
      case EventKind::Phase:
        if (static_cast<Phase>(e.sub) == Phase::Backward)
          tl_.backward_begins.push_back(static_cast<std::uint32_t>(tl_.ops.size()));
        break;
      case EventKind::CopyRate:
        (static_cast<CopyDir>(e.sub) == CopyDir::DeviceToHost ? tl_.measured_d2h_bps : tl_.measured_h2d_bps) =
            static_cast<double>(e.a);
        break;
      case EventKind::Sync:
      case EventKind::Step:
        break;
    }
  }

  StepTimeline finish() {
    // Group uses both ways; a block named twice by one launch counts once.
    std::sort(uses_.begin(), uses_.end());
    uses_.erase(std::unique(uses_.begin(), uses_.end()), uses_.end());
    for (std::size_t i = 0, u = 0; i < tl_.ops.size(); ++i) {
      tl_.ops[i].uses_begin = static_cast<std::uint32_t>(tl_.op_uses.size());
      for (; u < uses_.size() && uses_[u].first == i; ++u) tl_.op_uses.push_back(uses_[u].second);
      tl_.ops[i].uses_end = static_cast<std::uint32_t>(tl_.op_uses.size());
    }
    std::vector<std::vector<std::uint32_t>> per_block(tl_.blocks.size());
    for (auto [op, blk] : uses_) per_block[blk].push_back(op);
    for (std::size_t b = 0; b < tl_.blocks.size(); ++b) {
      tl_.blocks[b].uses_begin = static_cast<std::uint32_t>(tl_.block_uses.size());
      tl_.block_uses.insert(tl_.block_uses.end(), per_block[b].begin(), per_block[b].end());
      tl_.blocks[b].uses_end = static_cast<std::uint32_t>(tl_.block_uses.size());
    }
    tl_.by_ordinal.assign(next_ordinal_, 0);
    for (std::size_t b = 0; b < tl_.blocks.size(); ++b)
      if (!tl_.blocks[b].predates_step()) tl_.by_ordinal[tl_.blocks[b].ordinal] = static_cast<std::uint32_t>(b);
    return std::move(tl_);
  }

 private:
  void add_block(BlockId id, const LiveBlock& b, std::uint32_t ordinal) {
    BlockRecord r;
    r.id = id;
    r.bytes = b.bytes;
    r.ordinal = ordinal;
    r.alloc_op = static_cast<std::uint32_t>(tl_.ops.size());
    r.role = b.role;
    r.layer = b.layer;
    r.lazy = b.lazy;
    if (ordinal != kNoOrdinal) allocated_[id] = static_cast<std::uint32_t>(tl_.blocks.size());
    tl_.blocks.push_back(r);
  }

  // The block an id names now: the newest allocated in the step, else the
  // one from before it (blocks[i] for before_[i]); kNone: neither.
  std::uint32_t index_of(BlockId id) const {
    if (auto it = allocated_.find(id); it != allocated_.end()) return it->second;
    const auto it = std::lower_bound(before_.begin(), before_.end(), id);
    return it != before_.end() && *it == id ? static_cast<std::uint32_t>(it - before_.begin()) : kNone;
  }

  static constexpr std::uint32_t kNone = UINT32_MAX;

  LiveBlocks& live_;
  StepTimeline tl_;
  // Blocks by id: those from before the step sorted (their index is their
  // place, so a step with 1e5 of them builds no table of them), those
  // allocated in it in a table.
  std::vector<BlockId> before_;
  std::unordered_map<BlockId, std::uint32_t> allocated_;
  std::unordered_map<LaunchSeq, std::uint32_t> op_of_seq_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> uses_;
  std::uint32_t next_ordinal_ = 0;
};

}  // namespace

void track_live(LiveBlocks& live, const Event& e) {
  if (e.kind == EventKind::Alloc) live[e.a] = LiveBlock{e.b, Role::Unknown, kNoLayer, (e.sub & kAllocLazy) != 0};
  if (e.kind == EventKind::Free) live.erase(e.a);
  if (e.kind == EventKind::Tag) {
    auto it = live.find(e.a);
    if (it != live.end()) it->second.role = static_cast<Role>(e.sub), it->second.layer = static_cast<std::uint32_t>(e.b);
  }
}

StepTimeline build_timeline(std::span<const Event> events, LiveBlocks& live) {
  TimelineBuilder b(live);
  for (const Event& e : events) b.feed(e);
  return b.finish();
}

std::vector<std::uint32_t> launches_before(std::span<const Event> events, std::span<const std::uint32_t> token_events) {
  std::vector<std::uint32_t> out;
  out.reserve(token_events.size());
  std::uint32_t launched = 0;
  std::size_t e = 0;
  for (std::uint32_t at : token_events) {
    for (; e < at && e < events.size(); ++e) launched += events[e].kind == EventKind::Launch;
    out.push_back(launched);
  }
  return out;
}

std::vector<std::uint32_t> token_ordinals(std::span<const Event> events, std::span<const std::uint32_t> token_events) {
  std::vector<std::uint32_t> out;
  out.reserve(token_events.size());
  // Ordinals by block id as of each event: an id freed and allocated again within
  // the step names its newest block.
  std::unordered_map<BlockId, std::uint32_t> ordinal_of;
  std::uint32_t next = 0;
  std::size_t e = 0;
  for (std::uint32_t at : token_events) {
    for (; e <= at && e < events.size(); ++e)
      if (events[e].kind == EventKind::Alloc) ordinal_of[events[e].a] = next++;
    if (at >= events.size()) {
      out.push_back(kNoOrdinal);
      continue;
    }
    const Event& ev = events[at];
    if (ev.kind == EventKind::Launch) {
      out.push_back(kLaunchToken);
    } else if (ev.kind == EventKind::Alloc) {
      out.push_back(ordinal_of[ev.a]);
    } else {
      auto it = ordinal_of.find(ev.a);
      out.push_back(it == ordinal_of.end() ? kNoOrdinal : (it->second | kFreeToken));
    }
  }
  return out;
}

std::uint64_t StepTimeline::compute_ns() const {
  std::uint64_t t = 0;
  for (const auto& op : ops) t += op.duration_ns;
  return t;
}

std::uint32_t StepTimeline::ops_matching(const std::vector<std::uint64_t>& expected) const {
  const std::size_t n = common_prefix(expected, tokens);
  if (n == tokens.size()) return static_cast<std::uint32_t>(ops.size());
  return token_op[n];
}

std::vector<std::uint64_t> StepTimeline::resident_profile() const {
  std::vector<std::int64_t> delta(ops.size() + 1, 0);
  for (const auto& b : blocks) {
    const std::uint32_t end = b.free_op == kNever ? static_cast<std::uint32_t>(ops.size()) : b.free_op;
    if (b.alloc_op >= end) continue;  // allocated and freed between two launches
    delta[b.alloc_op] += static_cast<std::int64_t>(b.bytes);
    delta[end] -= static_cast<std::int64_t>(b.bytes);
  }
  std::vector<std::uint64_t> out(ops.size());
  std::int64_t cur = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) out[i] = static_cast<std::uint64_t>(cur += delta[i]);
  return out;
}

StepTimeline span_timeline(std::span<const Event> events, const StepDetection& steps, const StepSpan& span,
                           LiveBlocks& live) {
  const std::span<const Event> own = events.subspan(span.begin_event, span.end_event - span.begin_event);
  StepTimeline tl = build_timeline(own, live);
  tl.tokens = steps.token_hashes(span);
  std::vector<std::uint32_t> at;
  for (std::size_t t = span.begin_token; t < span.end_token; ++t)
    at.push_back(static_cast<std::uint32_t>(steps.tokens[t].event - span.begin_event));
  tl.token_op = launches_before(own, at);
  tl.token_ordinals = token_ordinals(own, at);
  tl.signature = span.signature;
  return tl;
}

}  // namespace tierrt::policy
