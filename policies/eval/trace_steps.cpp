#include "policies/eval/trace_steps.hpp"

namespace tierrt::policy {
namespace {

// One timeline per non-prologue span, in order.
std::vector<StepTimeline> build_timelines(const Trace& trace, const StepDetection& steps) {
  std::vector<StepTimeline> out;
  LiveBlocks live;
  std::size_t pos = 0;
  for (const auto& span : steps.spans) {
    for (; pos < span.begin_event; ++pos) track_live(live, trace[pos]);
    if (span.prologue) continue;
    out.push_back(span_timeline(trace, steps, span, live));
    pos = span.end_event;
  }
  return out;
}

}  // namespace

TraceSteps analyse_trace(const Trace& trace, const ClassifierOptions& options) {
  TraceSteps out;
  out.detection = detect_steps(trace);
  out.steps = build_timelines(trace, out.detection);
  for (auto& tl : out.steps) classify(tl, options);
  return out;
}

}  // namespace tierrt::policy
