#include "policies/eval/trace_steps.hpp"

#include <algorithm>

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

// Without markers, a step is believed only if it repeats: at least two steps of
// the dominant shape that hold most of the stream, the last of them last, and
// (found through noise) all about as long as each other.
std::string why_no_step(const StepDetection& d, const std::vector<StepTimeline>& steps) {
  if (d.used_markers) return steps.empty() ? "the trace has step markers but no launch after them" : "";
  if (d.period_tokens == 0)
    return "no step markers, and no period over which the launches repeat and memory returns to its level";
  std::size_t dominant = 0, dominant_tokens = 0, tokens = 0;
  const StepSpan* last = nullptr;
  for (const auto& s : d.spans) {
    if (s.prologue) continue;
    last = &s;
    tokens += s.end_token - s.begin_token;
    if (s.shape == d.dominant_shape) ++dominant, dominant_tokens += s.end_token - s.begin_token;
  }
  if (dominant < 2) return "the step found does not repeat";
  if (2 * dominant_tokens < tokens) return "the step found is less than half of the trace";
  if (last->shape != d.dominant_shape) return "the trace does not end with the step found";
  if (d.noisy) {
    std::vector<std::size_t> launches;
    for (const auto& tl : steps) launches.push_back(tl.ops.size());
    std::sort(launches.begin(), launches.end());
    if (launches.front() * 5 < launches.back() * 4) return "the steps found differ in length by more than 20%";
  }
  return "";
}

}  // namespace

TraceSteps analyse_trace(const Trace& trace, const ClassifierOptions& options) {
  TraceSteps out;
  out.detection = detect_steps(trace);
  out.steps = build_timelines(trace, out.detection);
  for (auto& tl : out.steps) classify(tl, options);
  out.no_step = why_no_step(out.detection, out.steps);
  return out;
}

}  // namespace tierrt::policy
