// Prefetches handed from the policy thread to the launching threads.
//
// The policy thread learns of a launch only after it went out, and in a
// backward pass the application enqueues far ahead of the device: by the
// time the thread acts on launch k, the application may have reached the
// launch that needs a block the plan fetches "after launch k". So the thread
// arms the plan's prefetches for launches the application has not reached
// yet (as far as it knows), each with the launch sequence number after which
// it is due, and the launching thread whose launch reaches it carries it out
// once its own launch went out (what a framework's own offload does: it
// prefetches one layer ahead from the thread that launches the layers).
//
// Lock-free: one producer (the policy thread), any number of consumers. A
// slot is armed by storing its fields and then its block (release); a
// consumer takes it by swapping the block for null (one consumer wins). Only
// the producer writes `next_due_`; a consumer's check costs one load.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "allocator/block.h"

namespace tierrt {

class ArmedPrefetches {
 public:
  static constexpr std::size_t kSlots = 64;

  // Whether some prefetch may be due after launch `seq`.
  bool due(std::uint64_t seq) const noexcept { return seq >= next_due_.load(std::memory_order_acquire); }

  // The launching thread, after launch `seq` went out: carries out each
  // prefetch due by then with `prefetch(Block*)`, unless another thread
  // took it first. A block freed and reused since it was armed is left
  // alone: `still_at(Block*, va)` says whether the block is still the one
  // at the VA it was armed with (Block::va changes under alloc.blocks).
  template <class At, class F>
  void run_due(std::uint64_t seq, At&& still_at, F&& prefetch) noexcept {
    if (!due(seq)) return;
    for (Slot& s : slots_) {
      alloc::Block* b = s.block.load(std::memory_order_acquire);
      if (b == nullptr || s.at.load(std::memory_order_relaxed) > seq) continue;
      const CUdeviceptr va = s.va.load(std::memory_order_relaxed);
      if (!s.block.compare_exchange_strong(b, nullptr, std::memory_order_acq_rel)) continue;
      if (still_at(b, va)) prefetch(b);
    }
  }

  // The producer. Arms a prefetch of `b`, the block at `va`, due after
  // launch `at`; false when it is armed already or every slot is taken.
  bool arm(alloc::Block* b, CUdeviceptr va, std::uint64_t at) noexcept;
  // Disarms what launches up to `seq` passed without taking (they went out
  // on capturing streams, or their thread launches no more).
  void disarm_passed(std::uint64_t seq) noexcept;
  // Sets the check every launch makes to the earliest prefetch armed.
  void publish() noexcept;
  std::size_t armed() const noexcept;

 private:
  struct Slot {
    std::atomic<std::uint64_t> at{0};
    std::atomic<CUdeviceptr> va{0};
    std::atomic<alloc::Block*> block{nullptr};
  };
  std::array<Slot, kSlots> slots_;
  // The producer's own: false only once a scan found no slot armed (only
  // the producer arms), and next_due_ says so. The policy thread calls
  // disarm_passed and publish at every launch it hears of; while no
  // prefetch is armed (a plan with none ahead) they skip the 64 slots.
  bool maybe_armed_ = false;
  // Read by every launch: on a cache line of its own (the last of the
  // object, which its alignment rounds up), written only when it changes, so
  // that the launching thread's load hits its cache while the plan stands.
  alignas(64) std::atomic<std::uint64_t> next_due_{UINT64_MAX};
};

}  // namespace tierrt
