#include "stats_report.h"

#include <cstdio>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "policies/lifetime_class.hpp"
#include "runtime/engine.h"
#include "log.h"

namespace tierrt {

namespace {

double mib(std::uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }
double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }
unsigned long long ull(std::uint64_t v) { return static_cast<unsigned long long>(v); }

// The allocator counts bytes per class as the policy thread sets them: 0 for a
// block not classified yet, else 1 + the lifetime class.
const char* class_name(int c) {
  return c == 0 ? "unclassified" : policy::to_string(static_cast<policy::LifetimeClass>(c - 1));
}

// Hits over planned prefetches: a planned prefetch is a hit unless a launch
// had to wait for it. Demand fetches are not prefetches and are counted apart.
// Negative when nothing was planned (no rate: n/a, never 0 %).
double hit_rate(std::uint64_t planned, std::uint64_t late) {
  if (planned == 0) return -1;
  return 100.0 * static_cast<double>(planned - std::min(planned, late)) / static_cast<double>(planned);
}

// Everything the report says, gathered once.
struct Report {
  tierrt_stats t{};
  alloc::Stats s;
  std::uint64_t late_ns = 0, freed_spilled = 0, dropped_events = 0;
  bool planner = false;
  std::uint64_t class_blocks[8] = {};  // blocks of each class in the step learned last
  std::uint32_t learned_launches = 0;
  RunMonitor::Snapshot run;
  bool have_run = false;
};

Report gather(const Engine& e) {
  Report r;
  r.t.struct_size = sizeof r.t;
  fill_public_stats(e, &r.t);
  r.s = e.allocator_stats();
  r.late_ns = e.moves().late_ns();
  r.freed_spilled = e.bytes_freed_while_spilled();
  if (const PolicyThread* p = e.planner()) {
    r.planner = true;
    r.dropped_events = p->dropped();
    const PolicyThread::LearnedStep step = p->learned_step();
    r.learned_launches = step.launches;
    for (policy::LifetimeClass c : step.classes) ++r.class_blocks[1 + static_cast<int>(c)];
  }
  if (RunMonitor* m = e.monitor()) {
    r.run = m->snapshot();
    r.have_run = true;
  }
  return r;
}

// The host tier's NUMA node: a pinned buffer on the far socket is copied
// across the inter-socket link, slower.
void write_host_node(FILE* f, const alloc::Stats& s) {
  switch (s.host_placement) {
    case alloc::HostPlacement::OnNode:
      std::fprintf(f, "  host NUMA node          %10d (the GPU's; %.1f MiB of host memory on it", s.host_node,
                   mib(s.host_node_bytes));
      if (s.host_unplaced_bytes || s.host_node_problem)
        std::fprintf(f, "; %.1f MiB elsewhere%s%s", mib(s.host_unplaced_bytes), s.host_node_problem ? ": " : "",
                     s.host_node_problem ? s.host_node_problem : "");
      std::fprintf(f, ")\n");
      return;
    case alloc::HostPlacement::Unplaced:
      std::fprintf(f, "  host NUMA node          %10s (the GPU's node %d: %s; %.1f MiB pinned wherever touched)\n",
                   "unplaced", s.host_node, s.host_node_problem ? s.host_node_problem : "not usable", mib(s.host_unplaced_bytes));
      return;
    case alloc::HostPlacement::FirstTouch:
      std::fprintf(f, "  host NUMA node          %10s (the GPU names no node; %.1f MiB pinned wherever touched)\n",
                   "first touch", mib(s.host_unplaced_bytes));
      return;
    case alloc::HostPlacement::DriverChoice:
      std::fprintf(f, "  host NUMA node          %10s (remap: the GPU names no node, the driver picks one)\n",
                   "the driver's");
      return;
  }
}

// The JSON host object's placement members.
void write_json_host_node(FILE* f, const alloc::Stats& s) {
  const bool node = s.host_placement == alloc::HostPlacement::OnNode || s.host_placement == alloc::HostPlacement::Unplaced;
  std::fprintf(f, ", \"placement\": \"%s\", \"numa_node\": ", alloc::to_string(s.host_placement));
  if (node) std::fprintf(f, "%d", s.host_node);
  else std::fprintf(f, "null");
  std::fprintf(f, ", \"bytes_on_node\": %llu, \"bytes_unplaced\": %llu, \"placement_problem\": ",
               ull(s.host_node_bytes), ull(s.host_unplaced_bytes));
  // Static phrases of tierrt's own: nothing in them needs escaping.
  if (s.host_node_problem) std::fprintf(f, "\"%s\"", s.host_node_problem);
  else std::fprintf(f, "null");
}

void write_text(FILE* f, const Report& r) {
  const tierrt_stats& t = r.t;
  const alloc::Stats& s = r.s;
  const std::uint64_t spilled_now = s.bytes[static_cast<int>(alloc::State::Spilled)];
  std::fprintf(f, "tierrt stats (pid %d)\n", static_cast<int>(getpid()));
  std::fprintf(f, "  peak device memory      %10.1f MiB with tiering, %.1f MiB without (peak of live tracked bytes)\n",
               mib(t.device_peak_bytes), mib(t.peak_bytes_untiered));
  std::fprintf(f, "  budgets                 %10.1f MiB device, %.1f MiB host\n", mib(t.device_budget), mib(t.host_budget));
  if (t.tiering_stopped)
    std::fprintf(f, "  TIERING STOPPED         after a failure of tierrt's own (see the log): nothing spilled since\n");
  if (t.over_budget)
    std::fprintf(f, "  over the device budget  %10llu times (nothing more could be spilled; the device had room)\n",
                 ull(t.over_budget));
  std::fprintf(f, "  host tier               %10.1f MiB now, %.1f MiB at peak\n", mib(t.host_bytes_in_use),
               mib(t.host_peak_bytes));
  write_host_node(f, s);
  std::fprintf(f, "  spilled                 %10llu blocks, %.1f MiB (%llu more started, then used again in time; "
               "%llu failed)\n", ull(s.spills_done), mib(t.bytes_spilled), ull(t.spills_aborted), ull(t.spills_failed));
  std::fprintf(f, "  fetched back            %10llu blocks, %.1f MiB (%llu on demand, of which %llu made their stream "
               "wait %.2f ms; %llu prefetches put off for want of room; %llu failed); %.1f MiB freed while on the "
               "host, %.1f MiB on the host now\n", ull(t.fetches),
               mib(t.bytes_fetched), ull(t.demand_fetches), ull(t.demand_fetches_waited), ms(t.demand_wait_ns),
               ull(t.fetches_put_off), ull(t.fetches_failed), mib(r.freed_spilled), mib(spilled_now));
  std::fprintf(f, "  freed memory reused     %10llu fetches took a freed allocation's memory, its last uses waited for "
               "on the device; %llu needed new device memory (cuMemCreate)\n", ull(t.chunks_handed_over),
               ull(t.fetch_chunks_created));
  const double rate = hit_rate(t.planned_prefetches, t.late_fetches);
  if (rate < 0)
    std::fprintf(f, "  prefetch hit rate              n/a (no prefetch planned)\n");
  else
    std::fprintf(f, "  prefetch hit rate       %10.1f %% of %llu planned (%llu late; launches waited %.2f ms)\n", rate,
                 ull(t.planned_prefetches), ull(t.late_fetches), ms(r.late_ns));
  if (s.groups || s.fenced_moves || s.parked_group_bytes)
    std::fprintf(f, "  granule groups          %10llu now, %.1f MiB never used, %.1f MiB kept from freed ones; %llu "
                 "moves fenced, %llu launches waited for one (%.2f ms)\n", ull(s.groups), mib(s.untouched_bytes),
                 mib(s.parked_group_bytes), ull(s.fenced_moves), ull(s.fence_waits), ms(s.fence_wait_ns));
  std::fprintf(f, "  link, measured          %10.2f GB/s device to host, %.2f GB/s host to device%s\n",
               static_cast<double>(t.d2h_bytes_per_s) / 1e9, static_cast<double>(t.h2d_bytes_per_s) / 1e9,
               t.d2h_bytes_per_s || t.h2d_bytes_per_s ? "" : " (nothing copied)");
  std::fprintf(f, "  allocations             %10llu tracked, %llu reached the driver (%llu cache hits)\n",
               ull(t.allocations), ull(t.driver_allocations), ull(s.cache_hits));
  std::fprintf(f, "  launches seen           %10llu; steps marked %llu\n", ull(t.launches_seen), ull(t.steps_marked));
  std::fprintf(f, "  use events              %10llu recorded; %llu uses shared their stream's next one\n",
               ull(t.use_events), ull(t.lazy_uses));
  if (r.planner) {
    std::fprintf(f, "  planner                 %10llu spills, %llu prefetches started (%llu by the launching "
                 "threads) over %llu steps learned; %llu mispredictions; %llu events dropped\n",
                 ull(t.planned_spills), ull(t.planned_prefetches), ull(t.prefetches_by_launchers),
                 ull(t.steps_learned), ull(t.mispredictions), ull(r.dropped_events));
    if (r.learned_launches) std::fprintf(f, "  step learned last       %10u launches\n", r.learned_launches);
  }
  std::fprintf(f, "  per lifetime class      live bytes now (blocks in the step learned last)\n");
  for (int c = 0; c < 8; ++c)
    if (s.class_bytes[c] || r.class_blocks[c])
      std::fprintf(f, "    %-21s %10.1f MiB (%llu blocks)\n", class_name(c), mib(s.class_bytes[c]),
                   ull(r.class_blocks[c]));
  if (!r.have_run) return;
  std::fprintf(f, "  steps                   %zu shown%s\n", r.run.steps.size(),
               r.run.steps_dropped ? (", the " + std::to_string(r.run.steps_dropped) + " before them dropped").c_str()
                                   : "");
  if (r.run.steps.empty()) return;
  std::fprintf(f, "    %6s %10s %10s %12s %12s %7s %9s %9s\n", "step", "time ms", "stall ms", "to host MiB",
               "to dev MiB", "demand", "planned", "hit rate");
  for (const StepRow& row : r.run.steps) {
    const double h = hit_rate(row.planned_prefetches, row.late_prefetches);
    char hit[16];
    if (h < 0) std::snprintf(hit, sizeof hit, "n/a");
    else std::snprintf(hit, sizeof hit, "%.1f%%", h);
    char step[48];
    if (row.steps > 1) std::snprintf(step, sizeof step, "%llu-%llu", ull(row.index + 1 - row.steps), ull(row.index));
    else std::snprintf(step, sizeof step, "%llu", ull(row.index));
    std::fprintf(f, "    %6s %10.3f %10.3f %12.2f %12.2f %7llu %9llu %9s\n", step, ms(row.ns),
                 ms(row.stall_ns), mib(row.bytes_spilled), mib(row.bytes_fetched), ull(row.demand_fetches),
                 ull(row.planned_prefetches), hit);
  }
}

// A rate or null (none planned).
std::string json_rate(double rate) {
  if (rate < 0) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", rate / 100.0);
  return b;
}

void write_json(FILE* f, const Report& r) {
  const tierrt_stats& t = r.t;
  const alloc::Stats& s = r.s;
  std::fprintf(f, "{\n  \"pid\": %d,\n", static_cast<int>(getpid()));
  std::fprintf(f, "  \"device\": {\"peak_bytes\": %llu, \"peak_bytes_without_tiering\": %llu, \"budget_bytes\": %llu, "
               "\"bytes_in_use\": %llu, \"over_budget\": %llu},\n", ull(t.device_peak_bytes), ull(t.peak_bytes_untiered),
               ull(t.device_budget), ull(t.device_bytes_in_use), ull(t.over_budget));
  std::fprintf(f, "  \"tiering_stopped\": %s,\n", t.tiering_stopped ? "true" : "false");
  std::fprintf(f, "  \"host\": {\"peak_bytes\": %llu, \"budget_bytes\": %llu, \"bytes_in_use\": %llu",
               ull(t.host_peak_bytes), ull(t.host_budget), ull(t.host_bytes_in_use));
  write_json_host_node(f, s);
  std::fprintf(f, "},\n");
  std::fprintf(f, "  \"moves\": {\"spills\": %llu, \"spills_aborted\": %llu, \"spills_failed\": %llu, "
               "\"bytes_spilled\": %llu, \"fetches\": %llu, \"demand_fetches\": %llu, \"fetches_failed\": %llu, "
               "\"fetches_put_off\": %llu, \"chunks_handed_over\": %llu, \"fetch_chunks_created\": %llu, "
               "\"prefetches_by_launchers\": %llu, "
               "\"demand_fetches_waited\": %llu, \"demand_wait_ns\": %llu, "
               "\"bytes_fetched\": %llu, \"bytes_freed_while_spilled\": %llu, \"bytes_spilled_now\": %llu, "
               "\"planned_prefetches\": %llu, \"late_prefetches\": %llu, \"prefetch_hit_rate\": %s, "
               "\"stall_ns\": %llu},\n",
               ull(s.spills_done), ull(t.spills_aborted), ull(t.spills_failed), ull(t.bytes_spilled), ull(t.fetches),
               ull(t.demand_fetches), ull(t.fetches_failed), ull(t.fetches_put_off), ull(t.chunks_handed_over),
               ull(t.fetch_chunks_created), ull(t.prefetches_by_launchers), ull(t.demand_fetches_waited),
               ull(t.demand_wait_ns),
               ull(t.bytes_fetched), ull(r.freed_spilled),
               ull(s.bytes[static_cast<int>(alloc::State::Spilled)]), ull(t.planned_prefetches), ull(t.late_fetches),
               json_rate(hit_rate(t.planned_prefetches, t.late_fetches)).c_str(), ull(r.late_ns));
  std::fprintf(f, "  \"granule_groups\": {\"live\": %llu, \"unused_bytes\": %llu, \"parked_bytes\": %llu, "
               "\"fenced_moves\": %llu, \"fence_waits\": %llu, \"fence_wait_ns\": %llu},\n", ull(s.groups),
               ull(s.untouched_bytes), ull(s.parked_group_bytes), ull(s.fenced_moves), ull(s.fence_waits),
               ull(s.fence_wait_ns));
  std::fprintf(f, "  \"link\": {\"d2h_bytes_per_s\": %llu, \"h2d_bytes_per_s\": %llu},\n", ull(t.d2h_bytes_per_s),
               ull(t.h2d_bytes_per_s));
  std::fprintf(f, "  \"allocations\": {\"tracked\": %llu, \"driver\": %llu, \"cache_hits\": %llu},\n",
               ull(t.allocations), ull(t.driver_allocations), ull(s.cache_hits));
  std::fprintf(f, "  \"launches\": %llu,\n  \"steps_marked\": %llu,\n", ull(t.launches_seen), ull(t.steps_marked));
  std::fprintf(f, "  \"use_events\": {\"recorded\": %llu, \"lazy_uses\": %llu},\n", ull(t.use_events),
               ull(t.lazy_uses));
  if (r.planner)
    std::fprintf(f, "  \"planner\": {\"spills\": %llu, \"prefetches\": %llu, \"steps_learned\": %llu, "
                 "\"mispredictions\": %llu, \"events_dropped\": %llu, \"learned_step_launches\": %u},\n",
                 ull(t.planned_spills), ull(t.planned_prefetches), ull(t.steps_learned), ull(t.mispredictions),
                 ull(r.dropped_events), r.learned_launches);
  else
    std::fprintf(f, "  \"planner\": null,\n");
  std::fprintf(f, "  \"classes\": [");
  const char* sep = "";
  for (int c = 0; c < 8; ++c) {
    if (!s.class_bytes[c] && !r.class_blocks[c]) continue;
    std::fprintf(f, "%s\n    {\"class\": \"%s\", \"live_bytes\": %llu, \"blocks_in_learned_step\": %llu}", sep,
                 class_name(c), ull(s.class_bytes[c]), ull(r.class_blocks[c]));
    sep = ",";
  }
  std::fprintf(f, "\n  ],\n  \"steps_dropped\": %llu,\n  \"steps\": [", ull(r.run.steps_dropped));
  sep = "";
  for (const StepRow& row : r.run.steps) {
    std::fprintf(f, "%s\n    {\"step\": %llu, \"steps_covered\": %llu, \"start_ns\": %llu, \"ns\": %llu, \"stall_ns\": %llu, "
                 "\"bytes_spilled\": %llu, \"bytes_fetched\": %llu, \"demand_fetches\": %llu, "
                 "\"planned_prefetches\": %llu, \"late_prefetches\": %llu, \"prefetch_hit_rate\": %s}",
                 sep, ull(row.index), ull(row.steps), ull(row.start_ns), ull(row.ns), ull(row.stall_ns), ull(row.bytes_spilled),
                 ull(row.bytes_fetched), ull(row.demand_fetches), ull(row.planned_prefetches),
                 ull(row.late_prefetches), json_rate(hit_rate(row.planned_prefetches, row.late_prefetches)).c_str());
    sep = ",";
  }
  std::fprintf(f, "\n  ]\n}\n");
}

std::uint64_t public_placement(alloc::HostPlacement p) {
  switch (p) {
    case alloc::HostPlacement::FirstTouch: return TIERRT_HOST_FIRST_TOUCH;
    case alloc::HostPlacement::OnNode: return TIERRT_HOST_ON_NODE;
    case alloc::HostPlacement::Unplaced: return TIERRT_HOST_UNPLACED;
    case alloc::HostPlacement::DriverChoice: return TIERRT_HOST_DRIVER_CHOICE;
  }
  return TIERRT_HOST_FIRST_TOUCH;
}

bool ends_with(const std::string& s, const char* tail) {
  const std::size_t n = std::strlen(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
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
  t.fetches_put_off = s.fetches_put_off;
  t.chunks_handed_over = s.chunks_handed_over;
  t.fetch_chunks_created = s.fetch_chunks_created;
  t.over_budget = s.over_budget;
  t.tiering_stopped = s.tiering_stopped ? 1 : 0;
  t.host_placement = public_placement(s.host_placement);
  const bool named = s.host_placement == alloc::HostPlacement::OnNode || s.host_placement == alloc::HostPlacement::Unplaced;
  t.host_numa_node = named && s.host_node >= 0 ? static_cast<std::uint64_t>(s.host_node) : UINT64_MAX;
  t.host_numa_bytes = s.host_node_bytes;
  t.host_unplaced_bytes = s.host_unplaced_bytes;
  t.granule_groups = s.groups;
  t.granule_unused_bytes = s.untouched_bytes;
  t.granule_fenced_moves = s.fenced_moves;
  t.granule_fence_waits = s.fence_waits;
  t.granule_fence_wait_ns = s.fence_wait_ns;
  t.bytes_spilled = s.bytes_spilled;
  t.fetches = s.fetches;
  t.demand_fetches = s.demand_fetches;
  t.bytes_fetched = s.bytes_fetched;
  t.launches_seen = e.launches();
  t.steps_marked = e.steps();
  t.late_fetches = e.moves().late_fetches();
  t.demand_fetches_waited = e.moves().demand_waited();
  t.demand_wait_ns = e.moves().demand_wait_ns();
  t.use_events = s.use_events;
  t.lazy_uses = s.lazy_uses;
  t.d2h_bytes_per_s = e.moves().bytes_per_s(alloc::MoveObserver::Direction::ToHost);
  t.h2d_bytes_per_s = e.moves().bytes_per_s(alloc::MoveObserver::Direction::ToDevice);
  if (const PolicyThread* p = e.planner()) {
    t.planned_spills = p->spills_issued();
    t.planned_prefetches = p->prefetches_issued();
    t.prefetches_by_launchers = p->prefetches_by_launchers();
    t.mispredictions = p->mispredictions();
    t.steps_learned = p->steps_learned();
  }
  size_t n = out->struct_size && out->struct_size < sizeof t ? out->struct_size : sizeof t;
  std::memcpy(out, &t, n);
  out->struct_size = n;
}

void say_host_placement(const alloc::Stats& s) noexcept {
  if (s.host_placement != alloc::HostPlacement::Unplaced) return;
  TIERRT_LOG(Error, "the GPU's NUMA node %d cannot hold the host tier: %s; pinned memory goes wherever it is touched",
             s.host_node, s.host_node_problem ? s.host_node_problem : "not usable");
}

void write_stats_report(const Engine& e) noexcept {
  const std::string& where = e.settings().stats;
  if (where.empty()) return;
  const std::string path = where == "-" ? where : config::expand_output_path(where);
  FILE* f = where == "-" ? stderr : std::fopen(path.c_str(), "w");
  if (!f) {
    TIERRT_LOG(Error, "cannot write TIERRT_STATS=\"%s\"", where.c_str());
    return;
  }
  try {
    const Report r = gather(e);
    if (ends_with(path, ".json")) write_json(f, r);
    else write_text(f, r);
  } catch (...) {  // no memory at exit: what was written stays
    TIERRT_LOG(Error, "TIERRT_STATS: no memory to gather the report");
  }
  if (f != stderr) std::fclose(f);
}

}  // namespace tierrt
