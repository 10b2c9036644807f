// From a trace to the classified steps a policy learns from and is replayed on.
#pragma once

#include <vector>

#include "policies/event.hpp"
#include "policies/lifetime_classifier.hpp"
#include "policies/step_detector.hpp"
#include "policies/step_timeline.hpp"

namespace tierrt::policy {

struct TraceSteps {
  StepDetection detection;
  std::vector<StepTimeline> steps;  // every non-prologue span, classified
};

TraceSteps analyse_trace(const Trace& trace, const ClassifierOptions& options = {});

}  // namespace tierrt::policy
