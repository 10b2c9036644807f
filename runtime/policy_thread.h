// The planner, fed and obeyed off the launch path. Hooks post events into a
// lock-free ring (an atomic increment and a few stores); one thread drains
// it into the policy engine, which learns the step and plans at its end, and
// carries out the plan's triggers (spill after a block's last use, prefetch
// ahead of its next) through the allocator. The launch path never plans,
// never waits for this thread, and never takes its lock.
//
// The thread runs a launch or so behind the launches themselves (it learns a
// launch's duration when the next one arrives), so a prefetch it issues may
// arrive late: the launch then waits on it (or fetches on demand), correct
// either way.
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "allocator/allocator.h"
#include "policies/event.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt {

namespace policy {
class PolicyEngine;
}

class PolicyThread {
 public:
  // Starts the thread with `ctx` current.
  PolicyThread(alloc::Allocator& allocator, CUcontext ctx, std::uint64_t budget);
  ~PolicyThread();

  void post(const policy::Event& e) noexcept;

  std::uint64_t dropped() const noexcept { return dropped_.load(); }
  std::uint64_t prefetches_issued() const noexcept { return prefetches_.load(); }
  std::uint64_t spills_issued() const noexcept { return spills_.load(); }

 private:
  struct Slot {
    std::atomic<std::uint64_t> turn{0};
    policy::Event event;
    std::uint64_t ns = 0;
  };
  static constexpr std::uint64_t kSlots = 1u << 16;

  void run();
  bool take(policy::Event* e, std::uint64_t* ns) noexcept;
  void feed(const policy::Event& e, std::uint64_t ns);
  void record_launch_held();
  alloc::Block* block_for(std::uint32_t ordinal) const;
  void act(policy::Action action);

  alloc::Allocator& allocator_;
  CUcontext ctx_;
  std::unique_ptr<policy::PolicyEngine> engine_;
  std::unique_ptr<Slot[]> ring_;
  std::atomic<std::uint64_t> head_{0};  // next slot to write
  std::uint64_t tail_ = 0;              // next slot to read (this thread only)
  std::atomic<bool> sleeping_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<std::uint64_t> dropped_{0}, prefetches_{0}, spills_{0};

  // The launch held back until its duration is known, and the uses that came with it.
  bool held_ = false;
  policy::Event held_launch_{};
  std::uint64_t held_ns_ = 0;
  std::vector<policy::Event> held_uses_;
  std::vector<policy::Trigger> triggers_;
};

}  // namespace tierrt
