// What tierrt reports about itself: the public stats struct and the summary
// TIERRT_STATS writes at exit.
#pragma once

#include "tierrt/tierrt.h"

namespace tierrt {

namespace alloc {
struct Stats;
}
class Engine;

void fill_public_stats(const Engine& e, tierrt_stats* out) noexcept;
// Writes the summary where TIERRT_STATS says ("-": stderr); no-op when unset.
void write_stats_report(const Engine& e) noexcept;
// One error line when copy mode's pinned memory cannot go on the GPU's NUMA
// node (not a node of this host, memory policies or registration refused),
// for the engine to say once its allocator exists. The job runs all the
// same; its copies may run at the far socket's rate.
void say_host_placement(const alloc::Stats& s) noexcept;

}  // namespace tierrt
