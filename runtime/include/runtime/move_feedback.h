// What the mover saw, turned into what the rest of tierrt learns from: copy
// rates measured on the device (for the planner's link model, the recorded
// trace and the stats), demand fetches (the plan's mispredictions) and
// prefetches that arrived late (the plan starts them earlier next step).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "allocator/ranked_mutex.h"
#include "runtime/lock_rank.h"
#include "allocator/allocator.h"

namespace tierrt {

class PolicyThread;
class Recorder;

class MoveFeedback final : public alloc::MoveObserver {
 public:
  // Either may be null. Both must outlive this object.
  MoveFeedback(Recorder* recorder, PolicyThread* policy) noexcept : recorder_(recorder), policy_(policy) {}

  void demand_fetch(const alloc::Block& b) noexcept override;
  void late_fetch(const alloc::Block& b, std::uint64_t late_ns) noexcept override;
  void demand_fetch_waited(const alloc::Block& b, std::uint64_t wait_ns) noexcept override;
  void copy_done(Direction d, std::uint64_t bytes, std::uint64_t ns) noexcept override;
  // One log line: the job needs more than the device budget (once per run).
  void over_budget(std::uint64_t used, std::uint64_t limit) noexcept override;
  // One log line: a failure of tierrt's own was contained (Allocator::stop_tiering).
  void tiering_stopped(const char* why) noexcept override;

  // Over the whole run: bytes per second of device copy time; 0 before the first copy.
  std::uint64_t bytes_per_s(Direction d) const noexcept;
  std::uint64_t late_fetches() const noexcept { return late_.load(std::memory_order_relaxed); }
  std::uint64_t late_ns() const noexcept { return late_ns_.load(std::memory_order_relaxed); }
  // Demand fetches whose launch's stream waited for the copy, and how long.
  std::uint64_t demand_waited() const noexcept { return demand_waited_.load(std::memory_order_relaxed); }
  std::uint64_t demand_wait_ns() const noexcept { return demand_wait_ns_.load(std::memory_order_relaxed); }

  // Copies are reported in batches of at least this many bytes per direction:
  // one small copy's time is mostly fixed cost, not bandwidth.
  static constexpr std::uint64_t kReportBytes = 64ull << 20;

 private:
  struct Totals {
    std::uint64_t bytes = 0, ns = 0;  // since the last report
    std::atomic<std::uint64_t> all_bytes{0}, all_ns{0};
  };
  Recorder* recorder_;
  PolicyThread* policy_;
  RankedMutex mu_{kRankMoveFeedback, "runtime.move_feedback"};  // the batch; copies are reported by the mover thread, off every hot path
  Totals totals_[2];
  std::atomic<std::uint64_t> late_{0}, late_ns_{0}, demand_waited_{0}, demand_wait_ns_{0};
};

}  // namespace tierrt
