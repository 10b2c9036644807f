#include "runtime/move_feedback.h"

#include "policies/event.hpp"
#include "runtime/policy_thread.h"
#include "runtime/recorder.h"
#include "log.h"

namespace tierrt {

void MoveFeedback::over_budget(std::uint64_t used, std::uint64_t limit) noexcept {
  TIERRT_LOG(Warn, "device memory passed the budget (%llu MiB held, budget %llu MiB): nothing more could be spilled, "
             "and the device had room", static_cast<unsigned long long>(used >> 20),
             static_cast<unsigned long long>(limit >> 20));
}

void MoveFeedback::tiering_stopped(const char* why) noexcept {
  TIERRT_LOG(Error, "tiering stopped: %s; no block is spilled from now on, spilled blocks come back, the job goes on",
             why);
  if (policy_) policy_->wake();  // it calls the spilled blocks back, napping or not
}

void MoveFeedback::demand_fetch(const alloc::Block& b) noexcept {
  if (recorder_ && recorder_->samples_on()) recorder_->mark(SampleKind::DemandFetch, b.va, b.size);
  if (policy_) policy_->post_demand_fetch(b.va);
}

void MoveFeedback::late_fetch(const alloc::Block& b, std::uint64_t late_ns) noexcept {
  late_.fetch_add(1, std::memory_order_relaxed);
  late_ns_.fetch_add(late_ns, std::memory_order_relaxed);
  if (recorder_ && recorder_->samples_on()) recorder_->mark(SampleKind::LateFetch, late_ns, b.size);
  if (policy_) policy_->post_late_fetch(b.va, late_ns);
}

void MoveFeedback::demand_fetch_waited(const alloc::Block&, std::uint64_t wait_ns) noexcept {
  demand_waited_.fetch_add(1, std::memory_order_relaxed);
  demand_wait_ns_.fetch_add(wait_ns, std::memory_order_relaxed);
}

void MoveFeedback::copy_done(Direction d, std::uint64_t bytes, std::uint64_t ns) noexcept {
  TIERRT_LOG(Debug, "%s %llu bytes in %.3f ms", d == Direction::ToHost ? "spilled" : "fetched",
             static_cast<unsigned long long>(bytes), static_cast<double>(ns) / 1e6);
  if (recorder_ && recorder_->samples_on())
    recorder_->mark(d == Direction::ToHost ? SampleKind::Spill : SampleKind::Fetch, ns, bytes);
  Totals& t = totals_[static_cast<int>(d)];
  t.all_bytes.fetch_add(bytes, std::memory_order_relaxed);
  t.all_ns.fetch_add(ns, std::memory_order_relaxed);
  std::uint64_t rate = 0;
  {
    std::lock_guard lock(mu_);
    t.bytes += bytes;
    t.ns += ns;
    if (t.bytes < kReportBytes || t.ns == 0) return;
    rate = static_cast<std::uint64_t>(static_cast<double>(t.bytes) * 1e9 / static_cast<double>(t.ns));
    t.bytes = t.ns = 0;
  }
  const auto dir = d == Direction::ToHost ? policy::CopyDir::DeviceToHost : policy::CopyDir::HostToDevice;
  const policy::Event e = policy::Event::copy_rate(dir, rate);
  if (recorder_ && recorder_->events_on()) recorder_->event(e);
  if (policy_) policy_->post(e);
}

std::uint64_t MoveFeedback::bytes_per_s(Direction d) const noexcept {
  const Totals& t = totals_[static_cast<int>(d)];
  const std::uint64_t ns = t.all_ns.load(std::memory_order_relaxed);
  return ns ? static_cast<std::uint64_t>(static_cast<double>(t.all_bytes.load(std::memory_order_relaxed)) * 1e9 /
                                         static_cast<double>(ns))
            : 0;
}

}  // namespace tierrt
