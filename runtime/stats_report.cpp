#include "stats_report.h"

#include <cstdio>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "policies/lifetime_class.hpp"
#include "runtime/engine.h"
#include "log.h"

namespace tierrt {

namespace {

double mib(std::uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

// The allocator counts bytes per class as the policy thread sets them: 0 for a
// block not classified yet, else 1 + the lifetime class.
const char* class_name(int c) {
  return c == 0 ? "unclassified" : policy::to_string(static_cast<policy::LifetimeClass>(c - 1));
}

// What moved between the tiers, and how fast. Every figure is a count of
// completed moves (demand fetches are among the fetches done), so no
// difference below can underflow; attempts that failed are shown apart.
void write_moves(FILE* f, const tierrt_stats& t, const alloc::Stats& s, const MoveFeedback& moves) noexcept {
  const std::uint64_t demand = std::min(t.demand_fetches, t.fetches);
  const std::uint64_t prefetched = t.fetches - demand;
  std::fprintf(f, "  spilled                 %10llu blocks, %10.1f MiB (%llu more started, then used again in time; "
               "%llu failed)\n",
               static_cast<unsigned long long>(s.spills_done), mib(t.bytes_spilled),
               static_cast<unsigned long long>(t.spills_aborted), static_cast<unsigned long long>(t.spills_failed));
  std::fprintf(f, "  fetched back            %10llu blocks, %10.1f MiB (%llu prefetched, %llu on demand; %llu failed)\n",
               static_cast<unsigned long long>(t.fetches), mib(t.bytes_fetched),
               static_cast<unsigned long long>(prefetched), static_cast<unsigned long long>(demand),
               static_cast<unsigned long long>(t.fetches_failed));
  if (prefetched)
    std::fprintf(f, "  prefetch hit rate       %10.1f %% (%llu prefetches late, by %.2f ms in all)\n",
                 100.0 * static_cast<double>(prefetched - std::min(prefetched, t.late_fetches)) /
                     static_cast<double>(prefetched),
                 static_cast<unsigned long long>(t.late_fetches), static_cast<double>(moves.late_ns()) / 1e6);
  if (t.d2h_bytes_per_s || t.h2d_bytes_per_s)
    std::fprintf(f, "  copies, measured        %10.2f GB/s device to host, %.2f GB/s host to device\n",
                 static_cast<double>(t.d2h_bytes_per_s) / 1e9, static_cast<double>(t.h2d_bytes_per_s) / 1e9);
}

// What the planner did, and the shape of the step it learned last.
void write_planner(FILE* f, const tierrt_stats& t, const PolicyThread& p) noexcept {
  std::fprintf(f, "  planner                 %10llu spills, %llu prefetches started over %llu steps; "
               "%llu mispredictions; %llu events dropped\n",
               static_cast<unsigned long long>(t.planned_spills), static_cast<unsigned long long>(t.planned_prefetches),
               static_cast<unsigned long long>(t.steps_learned), static_cast<unsigned long long>(t.mispredictions),
               static_cast<unsigned long long>(p.dropped()));
  try {
    const PolicyThread::LearnedStep step = p.learned_step();
    if (step.steps)
      std::fprintf(f, "  step learned last       %10u launches, %zu blocks\n", step.launches, step.classes.size());
  } catch (...) {  // no memory for the copy at exit: leave the line out
  }
}

}  // namespace

void fill_public_stats(const Engine& e, tierrt_stats* out) noexcept {
  const alloc::Stats s = e.allocator_stats();
  tierrt_stats t{};
  t.struct_size = sizeof t;
  t.device_bytes_in_use = s.device_used;
  t.device_peak_bytes = s.device_peak;
  t.peak_bytes_untiered = e.peak_live_bytes();
  t.device_budget = s.device_budget;
  t.host_bytes_in_use = s.host_used;
  t.host_peak_bytes = s.host_peak;
  t.host_budget = s.host_budget;
  for (int i = 0; i < alloc::kStateCount; ++i)
    if (static_cast<alloc::State>(i) != alloc::State::Freed) t.live_blocks += s.blocks[i];
  t.spilled_blocks = s.blocks[static_cast<int>(alloc::State::Spilled)];
  t.allocations = s.allocs;
  t.driver_allocations = s.driver_allocs;
  t.spills = s.spills;
  t.spills_aborted = s.spills_aborted;
  t.spills_failed = s.spills_failed;
  t.fetches_failed = s.fetches_failed;
  t.over_budget = s.over_budget;
  t.bytes_spilled = s.bytes_spilled;
  t.fetches = s.fetches;
  t.demand_fetches = s.demand_fetches;
  t.bytes_fetched = s.bytes_fetched;
  t.launches_seen = e.launches();
  t.steps_marked = e.steps();
  t.late_fetches = e.moves().late_fetches();
  t.d2h_bytes_per_s = e.moves().bytes_per_s(alloc::MoveObserver::Direction::ToHost);
  t.h2d_bytes_per_s = e.moves().bytes_per_s(alloc::MoveObserver::Direction::ToDevice);
  if (const PolicyThread* p = e.planner()) {
    t.planned_spills = p->spills_issued();
    t.planned_prefetches = p->prefetches_issued();
    t.mispredictions = p->mispredictions();
    t.steps_learned = p->steps_learned();
  }
  size_t n = out->struct_size && out->struct_size < sizeof t ? out->struct_size : sizeof t;
  std::memcpy(out, &t, n);
  out->struct_size = n;
}

void write_stats_report(const Engine& e) noexcept {
  const std::string& where = e.settings().stats;
  if (where.empty()) return;
  FILE* f = where == "-" ? stderr : std::fopen(config::expand_output_path(where).c_str(), "w");
  if (!f) {
    TIERRT_LOG(Error, "cannot write TIERRT_STATS=\"%s\"", where.c_str());
    return;
  }
  tierrt_stats t{};
  t.struct_size = sizeof t;
  fill_public_stats(e, &t);
  const alloc::Stats s = e.allocator_stats();
  std::fprintf(f, "tierrt stats (pid %d)\n", static_cast<int>(getpid()));
  std::fprintf(f, "  peak device memory      %10.1f MiB with tiering, %10.1f MiB of live tracked blocks (without)\n",
               mib(t.device_peak_bytes), mib(t.peak_bytes_untiered));
  std::fprintf(f, "  budgets                 %10.1f MiB device, %10.1f MiB host\n", mib(t.device_budget),
               mib(t.host_budget));
  if (t.over_budget)
    std::fprintf(f, "  over the device budget  %10llu times (nothing more could be spilled; the device had room)\n",
                 static_cast<unsigned long long>(t.over_budget));
  std::fprintf(f, "  host tier               %10.1f MiB now, %10.1f MiB at peak\n", mib(t.host_bytes_in_use),
               mib(t.host_peak_bytes));
  write_moves(f, t, s, e.moves());
  std::fprintf(f, "  allocations             %10llu tracked, %llu reached the driver (%llu cache hits)\n",
               static_cast<unsigned long long>(t.allocations), static_cast<unsigned long long>(t.driver_allocations),
               static_cast<unsigned long long>(s.cache_hits));
  std::fprintf(f, "  launches seen           %10llu; steps marked %llu\n", static_cast<unsigned long long>(t.launches_seen),
               static_cast<unsigned long long>(t.steps_marked));
  if (const PolicyThread* p = e.planner()) write_planner(f, t, *p);
  bool any_class = false;
  for (int c = 1; c < 8; ++c) any_class |= s.class_bytes[c] != 0;
  if (any_class) {  // only when something classified the blocks still live
    std::fprintf(f, "  live bytes per class   ");
    for (int c = 0; c < 8; ++c)
      if (s.class_bytes[c]) std::fprintf(f, " %s %.1f MiB", class_name(c), mib(s.class_bytes[c]));
    std::fprintf(f, "\n");
  }
  if (f != stderr) std::fclose(f);
}

}  // namespace tierrt
