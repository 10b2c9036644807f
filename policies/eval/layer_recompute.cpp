#include "layer_recompute.hpp"

#include <algorithm>

#include "layer_groups.hpp"

namespace tierrt::policy {
namespace {

// The layer input: the earliest allocated LayerInput tensor of the group (the
// residual stream written by the layer below; a later one is the mid-layer residual).
std::uint32_t layer_input(const StepTimeline& tl, const LayerGroup& g) {
  std::uint32_t best = kNever;
  for (std::uint32_t b : g.blocks)
    if (tl.blocks[b].role == Role::LayerInput && (best == kNever || tl.blocks[b].alloc_op < tl.blocks[best].alloc_op))
      best = b;
  return best;
}

bool live_at(const BlockRecord& r, std::uint32_t op) { return r.alloc_op <= op && (r.free_op == kNever || r.free_op > op); }

// Walks back from the recomputed tensors to their writers (a tensor's first use),
// and from each writer's inputs that are gone by the backward pass (temporaries,
// other recomputed tensors) to theirs; inputs still there are the recompute's inputs.
class Walk {
 public:
  Walk(const StepTimeline& tl, const std::vector<std::uint8_t>& recomputed, std::uint32_t before_op)
      : tl_(tl), recomputed_(recomputed), before_(before_op), needed_(tl.ops.size(), 0), input_(tl.blocks.size(), 0) {}

  void need_writer_of(std::uint32_t b) {
    const auto uses = tl_.uses_of(b);
    if (uses.empty()) return;
    const std::uint32_t w = uses.front();
    if (needed_[w]) return;
    needed_[w] = 1;
    for (std::uint32_t u : tl_.blocks_of(w)) {
      const BlockRecord& r = tl_.blocks[u];
      if (tl_.uses_of(u).front() == w) continue;  // written here: an output of the recompute
      if (recomputed_[u]) need_writer_of(u);
      else if (r.predates_step() || live_at(r, before_)) input_[u] = 1;
      else need_writer_of(u);  // a temporary freed since: made again on the way
    }
  }

  double needed_ns() const {
    double ns = 0;
    for (std::uint32_t op = 0; op < tl_.ops.size(); ++op)
      if (needed_[op]) ns += static_cast<double>(tl_.ops[op].duration_ns);
    return ns;
  }
  std::vector<std::uint32_t> inputs() const {
    std::vector<std::uint32_t> out;
    for (std::uint32_t b = 0; b < input_.size(); ++b)
      if (input_[b]) out.push_back(b);
    return out;
  }

 private:
  const StepTimeline& tl_;
  const std::vector<std::uint8_t>& recomputed_;
  std::uint32_t before_;
  std::vector<std::uint8_t> needed_, input_;
};

}  // namespace

std::vector<AddedLaunch> layer_recomputes(const StepTimeline& tl, const std::function<bool(Role)>& keep,
                                          RecomputeCost cost) {
  std::vector<AddedLaunch> out;
  std::vector<std::uint8_t> recomputed(tl.blocks.size(), 0);
  for (const LayerGroup& g : layer_groups(tl)) {
    const std::uint32_t input = layer_input(tl, g);
    if (input == kNever) continue;
    AddedLaunch lr;
    lr.before_op = g.bwd_first;
    std::uint32_t fwd_begin = kNever, fwd_end = 0;  // the layer's own forward launches
    for (std::size_t k = 0; k < g.blocks.size(); ++k) {
      const std::uint32_t b = g.blocks[k];
      fwd_end = std::max(fwd_end, g.gaps[k].last_before);
      if (b == input || keep(tl.blocks[b].role)) continue;
      lr.remade.push_back(b);
      recomputed[b] = 1;
      fwd_begin = std::min(fwd_begin, tl.uses_of(b).front());
    }
    if (lr.remade.empty()) continue;
    Walk walk(tl, recomputed, lr.before_op);
    for (std::uint32_t b : lr.remade) walk.need_writer_of(b);
    lr.reads = walk.inputs();
    if (cost == RecomputeCost::NeededLaunches) {
      lr.ns = walk.needed_ns();
    } else {
      for (std::uint32_t op = fwd_begin; op <= fwd_end && op < tl.ops.size(); ++op)
        lr.ns += static_cast<double>(tl.ops[op].duration_ns);
    }
    out.push_back(std::move(lr));
  }
  return out;
}

}  // namespace tierrt::policy
