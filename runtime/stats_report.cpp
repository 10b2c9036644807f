#include "runtime/stats_report.h"

#include <cstdio>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "runtime/engine.h"
#include "runtime/log.h"

namespace tierrt {

namespace {

double mib(std::uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

constexpr const char* kClassNames[] = {"unclassified", "persistent", "activation", "transient", "workspace",
                                       "class-5",      "class-6",    "class-7"};

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
  t.bytes_spilled = s.bytes_spilled;
  t.fetches = s.fetches;
  t.demand_fetches = s.demand_fetches;
  t.bytes_fetched = s.bytes_fetched;
  t.launches_seen = e.launches();
  t.steps_marked = e.steps();
  t.late_fetches = e.moves().late_fetches();
  t.d2h_bytes_per_s = e.moves().bytes_per_s(alloc::MoveObserver::Direction::ToHost);
  t.h2d_bytes_per_s = e.moves().bytes_per_s(alloc::MoveObserver::Direction::ToDevice);
  if (const PolicyThread* p = e.planner()) write_planner(f, t, *p);
  bool any_class = false;
  for (int c = 1; c < 8; ++c) any_class |= s.class_bytes[c] != 0;
  if (any_class) {  // only when something classified the blocks still live
    std::fprintf(f, "  live bytes per class   ");
    for (int c = 0; c < 8; ++c)
      if (s.class_bytes[c]) std::fprintf(f, " %s %.1f MiB", kClassNames[c], mib(s.class_bytes[c]));
    std::fprintf(f, "\n");
  }
  if (f != stderr) std::fclose(f);
}

}  // namespace tierrt
