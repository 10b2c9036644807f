#include "added_launches.hpp"

#include <algorithm>
#include <utility>

namespace tierrt::policy {
namespace {

// Where the recorded launches land once the recomputes are inserted.
struct OpMap {
  std::vector<std::uint32_t> at;     // recorded launch k -> its new index (k == size: the step's end)
  std::vector<std::uint32_t> start;  // recorded launch k -> the first launch inserted before it, else at[k]

  std::uint32_t alloc(std::uint32_t k) const { return at[k]; }
  std::uint32_t free(std::uint32_t k) const { return k == kNever ? kNever : start[k]; }
};

}  // namespace

ExecutedStep with_added_launches(const StepTimeline& tl, const std::vector<AddedLaunch>& layers_in) {
  std::vector<const AddedLaunch*> layers;
  for (const auto& l : layers_in) layers.push_back(&l);
  std::stable_sort(layers.begin(), layers.end(), [](auto* a, auto* b) { return a->before_op < b->before_op; });

  const auto n_ops = static_cast<std::uint32_t>(tl.ops.size());
  ExecutedStep ex;
  StepTimeline& out = ex.timeline;
  OpMap map{std::vector<std::uint32_t>(n_ops + 1), std::vector<std::uint32_t>(n_ops + 1)};
  std::vector<std::uint32_t> recompute_op(layers.size());
  {
    std::size_t l = 0;
    for (std::uint32_t k = 0; k <= n_ops; ++k) {
      map.start[k] = static_cast<std::uint32_t>(out.ops.size());
      for (; l < layers.size() && layers[l]->before_op == k; ++l) {
        recompute_op[l] = static_cast<std::uint32_t>(out.ops.size());
        const OpRecord& next = tl.ops[std::min(k, n_ops - 1)];
        out.ops.push_back(OpRecord{next.seq, static_cast<std::uint64_t>(layers[l]->ns), 0, 0});
        const auto ns = static_cast<double>(static_cast<std::uint64_t>(layers[l]->ns));
        (layers[l]->kind == AddedLaunch::Kind::Recompute ? ex.recompute_ns : ex.stream_copy_ns) += ns;
      }
      map.at[k] = static_cast<std::uint32_t>(out.ops.size());
      if (k < n_ops) out.ops.push_back(tl.ops[k]);
    }
  }

  // Blocks: the recorded ones (the recomputed cut short), then the second lives.
  out.blocks = tl.blocks;
  std::vector<std::uint32_t> copy_of(tl.blocks.size(), kNever), before_of(tl.blocks.size(), kNever);
  std::uint32_t next_ordinal = static_cast<std::uint32_t>(tl.by_ordinal.size());
  for (std::size_t l = 0; l < layers.size(); ++l)
    for (std::uint32_t b : layers[l]->remade) {
      copy_of[b] = static_cast<std::uint32_t>(out.blocks.size());
      before_of[b] = layers[l]->before_op;
      ex.recomputed.push_back(b);
      BlockRecord second = tl.blocks[b];
      second.ordinal = next_ordinal++;
      second.alloc_op = recompute_op[l];
      second.free_op = map.free(tl.blocks[b].free_op);
      second.role = Role::Temporary;
      second.cls = LifetimeClass::Transient;
      out.blocks.push_back(second);
    }
  std::vector<std::pair<std::uint32_t, std::uint32_t>> uses;  // (launch, block)
  for (std::uint32_t b = 0; b < tl.blocks.size(); ++b) {
    BlockRecord& r = out.blocks[b];
    std::uint32_t last_forward = r.alloc_op;
    for (std::uint32_t u : tl.uses_of(b)) {
      if (copy_of[b] != kNever && u >= before_of[b]) {
        uses.emplace_back(map.at[u], copy_of[b]);
      } else {
        uses.emplace_back(map.at[u], b);
        last_forward = u;
      }
    }
    r.alloc_op = r.predates_step() ? 0 : map.alloc(r.alloc_op);
    if (copy_of[b] != kNever) {
      r.free_op = map.at[last_forward] + 1;  // dropped after its last forward use
      r.role = Role::Temporary;
      r.cls = LifetimeClass::Transient;
    } else {
      r.free_op = map.free(r.free_op);
    }
  }
  for (std::size_t l = 0; l < layers.size(); ++l) {
    for (std::uint32_t b : layers[l]->reads) uses.emplace_back(recompute_op[l], b);
    for (std::uint32_t b : layers[l]->remade) uses.emplace_back(recompute_op[l], copy_of[b]);
  }

  // Group uses both ways, as the timeline builder does.
  std::sort(uses.begin(), uses.end());
  uses.erase(std::unique(uses.begin(), uses.end()), uses.end());
  for (std::size_t i = 0, u = 0; i < out.ops.size(); ++i) {
    out.ops[i].uses_begin = static_cast<std::uint32_t>(out.op_uses.size());
    for (; u < uses.size() && uses[u].first == i; ++u) out.op_uses.push_back(uses[u].second);
    out.ops[i].uses_end = static_cast<std::uint32_t>(out.op_uses.size());
  }
  std::vector<std::vector<std::uint32_t>> per_block(out.blocks.size());
  for (auto [op, blk] : uses) per_block[blk].push_back(op);
  for (std::size_t b = 0; b < out.blocks.size(); ++b) {
    out.blocks[b].uses_begin = static_cast<std::uint32_t>(out.block_uses.size());
    out.block_uses.insert(out.block_uses.end(), per_block[b].begin(), per_block[b].end());
    out.blocks[b].uses_end = static_cast<std::uint32_t>(out.block_uses.size());
  }
  out.by_ordinal = tl.by_ordinal;
  out.by_ordinal.resize(next_ordinal, 0);
  for (std::size_t b = tl.blocks.size(); b < out.blocks.size(); ++b)
    out.by_ordinal[out.blocks[b].ordinal] = static_cast<std::uint32_t>(b);

  // The rest as recorded, launch positions shifted.
  out.tokens = tl.tokens;
  for (std::uint32_t t : tl.token_op) out.token_op.push_back(map.start[std::min(t, n_ops)]);
  out.signature = tl.signature;
  for (std::uint32_t k : tl.backward_begins) out.backward_begins.push_back(map.start[std::min(k, n_ops)]);
  out.measured_d2h_bps = tl.measured_d2h_bps;
  out.measured_h2d_bps = tl.measured_h2d_bps;
  return ex;
}

}  // namespace tierrt::policy
