#include "policies/link_schedule.hpp"

#include <algorithm>

namespace tierrt::policy {
namespace {

// Launch times come from the step model's clock and copy times from this
// schedule's: the two agree up to rounding.
constexpr double kRoundingNs = 1;

double launch_end(const StepTimeline& tl, std::span<const double> t, std::uint32_t op) {
  return t[op] + static_cast<double>(tl.ops[op].duration_ns);
}

// The follower issues a launch's prefetches once the launch before it has ended.
double issue_time(const StepTimeline& tl, std::span<const double> t, std::uint32_t op) {
  return op == 0 ? t[0] : launch_end(tl, t, op - 1);
}

// The first launch at or after `op` that uses `block`, or the step's end.
double next_use_at_or_after(const StepTimeline& tl, std::span<const double> t, std::uint32_t block,
                            std::uint32_t op) {
  const auto uses = tl.uses_of(block);
  const auto it = std::lower_bound(uses.begin(), uses.end(), op);
  return it == uses.end() ? t.back() : t[*it];
}

// First come, first served, one copy at a time. Copies are in queue order, which
// is also the order of their ready times.
void serve(std::vector<ScheduledCopy>& queue, double bytes_per_s) {
  double free_at = 0;
  for (ScheduledCopy& c : queue) {
    c.start_ns = std::max(c.ready_ns, free_at);
    c.end_ns = c.start_ns + c.bytes / bytes_per_s * 1e9;
    free_at = c.end_ns;
  }
}

}  // namespace

bool ScheduledCopy::fits() const { return end_ns <= due_ns + kRoundingNs; }

bool LinkSchedule::fits() const {
  auto ok = [](const ScheduledCopy& c) { return c.fits(); };
  return std::all_of(d2h.begin(), d2h.end(), ok) && std::all_of(h2d.begin(), h2d.end(), ok);
}

namespace {
std::vector<std::uint32_t> late(const std::vector<ScheduledCopy>& queue) {
  std::vector<std::uint32_t> out;
  for (const ScheduledCopy& c : queue)
    if (!c.fits()) out.push_back(c.ordinal);
  return out;
}
}  // namespace

std::vector<std::uint32_t> LinkSchedule::late_spills() const { return late(d2h); }
std::vector<std::uint32_t> LinkSchedule::late_fetches() const { return late(h2d); }

double LinkSchedule::spill_end_if_queued(double ready_ns, double bytes, const LinkModel& link) const {
  // It would go behind every spill queued no later than it; their ends rise in queue order.
  const auto after = std::upper_bound(d2h.begin(), d2h.end(), ready_ns,
                                      [](double t, const ScheduledCopy& c) { return t < c.ready_ns; });
  const double free_at = after == d2h.begin() ? 0 : std::prev(after)->end_ns;
  return std::max(ready_ns, free_at) + link.d2h_ns(bytes);
}

std::uint32_t first_issued_at_or_after(const StepTimeline& tl, std::span<const double> launch_start_ns,
                                       double time_ns) {
  const auto n = static_cast<std::uint32_t>(tl.ops.size());
  if (launch_start_ns.size() != n + 1) return n;
  // Issue times rise with the launch index: binary search.
  std::uint32_t lo = 0, hi = n;
  while (lo < hi) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    if (issue_time(tl, launch_start_ns, mid) + kRoundingNs >= time_ns)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

LinkSchedule schedule_copies(const StepTimeline& tl, const TriggerTable& triggers,
                             std::span<const double> launch_start_ns, const LinkModel& link) {
  LinkSchedule s;
  const auto& t = launch_start_ns;
  if (t.size() != tl.ops.size() + 1) return s;
  auto block_of = [&](const Trigger& tr) {
    return tr.op < tl.ops.size() ? tl.block_named(tr.ordinal) : kNever;
  };
  // Per block, the launches its prefetches are issued at (the table is sorted by launch).
  std::vector<std::vector<std::uint32_t>> prefetch_ops(tl.blocks.size());
  for (const Trigger& tr : triggers.all()) {
    if (tr.action != Action::Prefetch) continue;
    if (const std::uint32_t b = block_of(tr); b != kNever) prefetch_ops[b].push_back(tr.op);
  }

  for (const Trigger& tr : triggers.all()) {
    const std::uint32_t b = block_of(tr);
    if (b == kNever) continue;
    ScheduledCopy c;
    c.ordinal = tr.ordinal;
    c.bytes = static_cast<double>(tl.blocks[b].bytes);
    if (tr.action == Action::Spill) {
      c.ready_ns = launch_end(tl, t, tr.op);
      const auto& p = prefetch_ops[b];
      const auto back = std::upper_bound(p.begin(), p.end(), tr.op);
      c.due_ns = back != p.end() ? issue_time(tl, t, *back) : next_use_at_or_after(tl, t, b, tr.op + 1);
      s.d2h.push_back(c);
    } else if (tr.action == Action::Prefetch) {
      c.ready_ns = issue_time(tl, t, tr.op);
      c.due_ns = next_use_at_or_after(tl, t, b, tr.op);
      s.h2d.push_back(c);
    }
  }
  serve(s.d2h, link.d2h_bytes_per_s);
  serve(s.h2d, link.h2d_bytes_per_s);
  return s;
}

}  // namespace tierrt::policy
