// The memory timeline of the run as an SVG (TIERRT_PLOT): live bytes by
// lifetime class (stacked), device bytes in use, the budget, host-tier
// bytes, step boundaries, and marks where spills and fetches happened.
#pragma once

#include <string>

#include "runtime/run_monitor.h"

namespace tierrt {

// Writes the SVG to `path` (%p and %r expanded); false after one log line.
bool write_timeline_svg(const std::string& path, const RunMonitor::Snapshot& run);

// A round step for an axis from 0 to `max` with about `ticks` ticks (1, 2
// or 5 times a power of ten).
double axis_step(double max, int ticks) noexcept;

}  // namespace tierrt
