#include "policies/eval/lower_bound.hpp"

#include <algorithm>
#include <vector>

#include "policies/idle_gap.hpp"

namespace tierrt::policy {

LowerBound lower_bound(const StepTimeline& tl, std::uint64_t budget, const LinkModel& link) {
  LowerBound lb;
  lb.compute_ns = static_cast<double>(tl.compute_ns());
  if (tl.ops.empty()) return lb;
  const auto start = ideal_start_times(tl);
  const auto profile = tl.resident_profile();

  // A lazy block (a granule-group member) not used yet holds no bytes: where
  // the device has no room it starts on the host without crossing the D2H
  // engine, so that much of the excess needs no outbound copy.
  std::vector<double> unwritten(tl.ops.size() + 1, 0);
  for (const BlockRecord& r : tl.blocks) {
    if (!r.lazy) continue;
    const std::uint32_t first = r.use_count() > 0 ? tl.block_uses[r.uses_begin] : static_cast<std::uint32_t>(tl.ops.size());
    const std::uint32_t from = r.predates_step() ? 0 : r.alloc_op;
    if (from >= first) continue;
    unwritten[from] += static_cast<double>(r.bytes);
    unwritten[first] -= static_cast<double>(r.bytes);
  }
  for (std::size_t i = 1; i < unwritten.size(); ++i) unwritten[i] += unwritten[i - 1];

  std::uint32_t peak = 0;
  double peak_excess = 0, out_stall = 0;
  std::vector<double> out_stall_upto(tl.ops.size(), 0);  // the outbound stall over launches 0..i
  for (std::uint32_t i = 0; i < tl.ops.size(); ++i) {
    const double excess = static_cast<double>(profile[i]) - static_cast<double>(budget);
    if (excess <= 0) continue;
    std::uint64_t needed_now = 0;
    for (std::uint32_t b : tl.blocks_of(i)) needed_now += tl.blocks[b].bytes;
    if (static_cast<double>(profile[i] - std::min(profile[i], needed_now)) < excess) lb.feasible = false;
    const double copied_out = std::max(0.0, excess - unwritten[i]);
    out_stall = std::max(out_stall, link.d2h_ns(copied_out) - start[i]);
    out_stall_upto[i] = out_stall;
    if (excess > peak_excess) peak_excess = excess, peak = i;
  }
  for (std::uint32_t i = 1; i < tl.ops.size(); ++i) out_stall_upto[i] = std::max(out_stall_upto[i], out_stall_upto[i - 1]);

  double back_stall = 0;
  if (peak_excess > 0) {
    // Bytes live at the peak launch but not used by it: the only ones that can be off.
    std::vector<std::uint8_t> used_at_peak(tl.blocks.size(), 0);
    for (std::uint32_t b : tl.blocks_of(peak)) used_at_peak[b] = 1;
    std::vector<std::uint32_t> first_use_after(tl.blocks.size(), kNever);
    double off_candidates = 0;
    for (std::uint32_t b = 0; b < tl.blocks.size(); ++b) {
      const BlockRecord& r = tl.blocks[b];
      const std::uint32_t end = r.free_op == kNever ? static_cast<std::uint32_t>(tl.ops.size()) : r.free_op;
      if (r.alloc_op > peak || end <= peak || used_at_peak[b]) continue;
      off_candidates += static_cast<double>(r.bytes);
      for (std::uint32_t u : tl.uses_of(b))
        if (u > peak) {
          first_use_after[b] = u;
          break;
        }
    }
    std::vector<double> needed_by(tl.ops.size() + 1, 0);
    for (std::uint32_t b = 0; b < tl.blocks.size(); ++b)
      if (first_use_after[b] != kNever) needed_by[first_use_after[b]] += static_cast<double>(tl.blocks[b].bytes);
    double needed = 0;
    for (std::uint32_t j = peak + 1; j < tl.ops.size(); ++j) {
      needed += needed_by[j];
      const double must_return = peak_excess - (off_candidates - needed);
      if (must_return > 0) back_stall = std::max(back_stall, link.h2d_ns(must_return) - (start[j] - start[peak]));
    }
  }
  // The outbound stall up to the peak accrues before the peak launch starts, the
  // return stall between the peak and a later launch: disjoint stretches of the
  // step, so both are paid. An outbound stall after the peak may overlap the return
  // window and only counts on its own.
  const double before_peak = peak_excess > 0 ? out_stall_upto[peak] : 0;
  lb.stall_ns = std::max({0.0, out_stall, before_peak + back_stall});
  return lb;
}

}  // namespace tierrt::policy
