#include "policies/prefetch_placement.hpp"

#include <algorithm>
#include <limits>

#include "policies/excess_tracker.hpp"

namespace tierrt::policy {
namespace {

// Bytes over budget at each launch once every spilled block is off for its whole gap.
std::vector<double> excess_with_all_off(const StepTimeline& tl, std::span<const SpilledBlock> spilled,
                                        std::uint64_t budget, MemoryFloor floor) {
  const auto profile = tl.resident_profile();
  std::vector<double> off(tl.ops.size() + 1, 0);
  for (const SpilledBlock& s : spilled) {
    off[s.gap.last_before + 1] += s.bytes;
    off[s.gap.first_after] -= s.bytes;
  }
  std::vector<double> excess(tl.ops.size());
  double cur = 0;
  for (std::size_t i = 0; i < tl.ops.size(); ++i) {
    cur += off[i];
    excess[i] = static_cast<double>(profile[i]) - static_cast<double>(budget) - cur;
    // Over budget whatever stays off: the reactive path makes room there anyway,
    // and holding every prefetch behind such a launch would make them all late.
    if (floor == MemoryFloor::WhereCoverable && excess[i] > 0) excess[i] = -std::numeric_limits<double>::infinity();
  }
  return excess;
}

}  // namespace

void PrefetchLeads::add(std::uint32_t ordinal, double more) {
  if (ordinal >= ns.size()) ns.resize(ordinal + 1, 0);
  ns[ordinal] += more;
}

std::vector<std::uint32_t> place_prefetches(const StepTimeline& tl, std::span<const SpilledBlock> spilled,
                                            const std::vector<double>& start, const LinkModel& link,
                                            const PrefetchLeads& leads, std::uint64_t budget, MemoryFloor floor) {
  std::vector<std::uint32_t> op(spilled.size());
  // Link: walk back from the last deadline so that each copy starts as late as it
  // can and still leaves the engine free for the next.
  double next_start = std::numeric_limits<double>::infinity();
  for (std::size_t k = spilled.size(); k-- > 0;) {
    const SpilledBlock& s = spilled[k];
    const double deadline = start[s.gap.first_after] - leads.at(tl.blocks[s.block].ordinal);
    const double begin = std::min(deadline, next_start) - link.h2d_ns(s.bytes);
    next_start = begin;
    // The last launch issued no later than `begin`, but never before the spill's launch.
    auto it = std::upper_bound(start.begin(), start.end() - 1, begin);
    const std::uint32_t at = it == start.begin() ? 0 : static_cast<std::uint32_t>(it - start.begin() - 1);
    op[k] = std::clamp(std::max(at, s.out_by), s.gap.last_before + 1, s.gap.first_after);
  }
  if (floor == MemoryFloor::None) return op;

  // Memory: blocks needed first get the room first, and the queue keeps its order.
  ExcessTracker memory(excess_with_all_off(tl, spilled, budget, floor));
  std::uint32_t previous = 0;
  for (std::size_t k = 0; k < spilled.size(); ++k) {
    const SpilledBlock& s = spilled[k];
    // The earliest launch from which the block can be back with every launch up to its use within budget.
    std::uint32_t lo = s.gap.last_before + 1, hi = s.gap.first_after;
    while (lo < hi) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      if (memory.max_over(mid, s.gap.first_after) + s.bytes <= 0)
        hi = mid;
      else
        lo = mid + 1;
    }
    op[k] = std::max({op[k], lo, previous});
    previous = op[k];
    memory.relieve(op[k], s.gap.first_after, -s.bytes);
  }
  return op;
}

}  // namespace tierrt::policy
