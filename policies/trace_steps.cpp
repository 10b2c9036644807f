#include "policies/trace_steps.hpp"

namespace tierrt::policy {

TraceSteps analyse_trace(const Trace& trace, const ClassifierOptions& options) {
  TraceSteps out;
  out.detection = detect_steps(trace);
  out.steps = build_timelines(trace, out.detection);
  for (auto& tl : out.steps) classify(tl, options);
  return out;
}

}  // namespace tierrt::policy
