// From a trace to the classified steps a policy learns from and is replayed on.
#pragma once

#include <string>
#include <vector>

#include "policies/event.hpp"
#include "policies/lifetime_classifier.hpp"
#include "policies/step_detector.hpp"
#include "policies/step_timeline.hpp"

namespace tierrt::policy {

struct TraceSteps {
  StepDetection detection;
  std::vector<StepTimeline> steps;  // every non-prologue span, classified
  // Empty when the steps are a training step repeating; otherwise why no step
  // was found (figures for these steps would describe no real step).
  std::string no_step;
};

TraceSteps analyse_trace(const Trace& trace, const ClassifierOptions& options = {});

}  // namespace tierrt::policy
