// The engine's outputs: the report, the memory timeline, the trace and the
// recording, and the monitor that samples what the first two show.
#include "runtime/engine.h"

#include "log.h"
#include "stats_report.h"
#include "timeline_svg.h"

namespace tierrt {

void Engine::start_monitor() noexcept {
  const Settings& s = settings_;
  if (s.stats.empty() && s.plot.empty() && s.trace.empty() && s.record.empty()) return;
  try {
    monitor_ = std::make_unique<RunMonitor>(&Engine::read_counters, [](void* e) noexcept {
      static_cast<Engine*>(e)->write_outputs();
    }, this);
  } catch (...) {
    TIERRT_LOG(Error, "cannot start the step and memory sampler; no per-step figures or timeline");
  }
  if (recorder_) recorder_->set_budget(alloc_->stats().device_budget);
}

RunCounters Engine::read_counters(void* engine) noexcept {
  const Engine& e = *static_cast<const Engine*>(engine);
  const alloc::Stats s = e.alloc_->stats();
  if (e.recorder_) e.recorder_->say_if_full();
  RunCounters c;
  c.device_used = s.device_used;
  c.host_used = s.host_used;
  c.device_budget = s.device_budget;
  for (int i = 0; i < 8; ++i) c.class_bytes[i] = s.class_bytes[i];
  c.bytes_spilled = s.bytes_spilled;
  c.bytes_fetched = s.bytes_fetched;
  c.demand_fetches = s.demand_fetches;
  c.late_prefetches = e.feedback_->late_fetches();
  c.stall_ns = e.feedback_->late_ns();
  if (e.policy_) {
    c.planned_prefetches = e.policy_->prefetches_issued();
    c.steps_detected = e.policy_->steps_learned();
  }
  return c;
}

void Engine::write_outputs() noexcept {
  std::lock_guard lock(outputs_mu_);
  write_stats_report(*this);
  if (!settings_.plot.empty() && monitor_) {
    try {
      write_timeline_svg(settings_.plot, monitor_->snapshot());
    } catch (...) {
      TIERRT_LOG(Error, "no memory to draw TIERRT_PLOT");
    }
  }
  if (recorder_) recorder_->write();
}

}  // namespace tierrt
