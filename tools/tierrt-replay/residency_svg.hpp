// Device memory over the replayed step, one line per policy, the budget as a dashed
// line: a standalone SVG file, labelled as modeled.
#pragma once

#include <ostream>

#include "policies/eval/policy_comparison.hpp"
#include "replay_report.hpp"

namespace tierrt::replay {

void write_residency_svg(std::ostream& out, const ReportContext& ctx, const policy::Comparison& c);

}  // namespace tierrt::replay
