// The host link a recorded run measured, and a link in words: shared by
// tierrt-replay and `tierrt-run --estimate`, which model a recording alike.
#pragma once

#include <optional>
#include <string>

#include "policies/event.hpp"
#include "policies/link_model.hpp"

namespace tierrt::policy {

// The mean of the CopyRate records per direction, named "measured"; a
// direction without records keeps `fallback`'s rate. Nothing when the trace
// has no CopyRate record (a run that moved nothing: observe mode).
std::optional<LinkModel> measured_link(const Trace& trace, const LinkModel& fallback);

// "pcie5 (H2D 53 GB/s, D2H 53 GB/s)"; slow links keep two decimals.
std::string describe_link(const LinkModel& link);

}  // namespace tierrt::policy
