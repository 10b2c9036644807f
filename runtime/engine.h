// The engine: what the hooks talk to. It owns the allocator for the device
// of the context current when tierrt first sees an allocation, turns launches
// and copies into residency requests, and keeps the counters the stats show.
//
// Hot paths (launch, copy): no allocation, no logging, no lock held across a
// driver call; a launch that names no tracked block costs a table probe and
// one O(1) lookup per 8-byte parameter word.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "allocator/allocator.h"
#include "runtime/capture_tracker.h"
#include "runtime/move_feedback.h"
#include "runtime/param_layouts.h"
#include "runtime/policy_thread.h"
#include "runtime/recorder.h"
#include "runtime/settings.h"

namespace tierrt {

// The distinct blocks one launch or copy names: on the caller's stack, or on
// the heap for the rare launch that names more than kInline (a kernel taking
// a table of pointers by value: up to 4096 in 32 KiB of parameters).
class BlockList {
 public:
  static constexpr int kInline = 256;
  void add(alloc::Block* b) noexcept {
    if (!more_.empty() || n_ == kInline) return add_more(b);
    for (int i = 0; i < n_; ++i)
      if (items_[i] == b) return;
    items_[n_++] = b;
  }
  bool empty() const noexcept { return n_ == 0 && more_.empty(); }
  // The heap could not hold the list: the launch must not go out (some of its
  // blocks would not be made resident).
  bool incomplete() const noexcept { return incomplete_; }
  std::span<alloc::Block* const> span() const noexcept {
    if (!more_.empty()) return {more_.data(), more_.size()};
    return {items_, static_cast<size_t>(n_)};
  }

 private:
  void add_more(alloc::Block* b) noexcept;
  alloc::Block* items_[kInline];
  int n_ = 0;
  std::vector<alloc::Block*> more_;
  bool incomplete_ = false;
};

class Engine {
 public:
  // The running engine, or null (off, not started yet, or failed to start).
  static Engine* active() noexcept { return g_active.load(std::memory_order_acquire); }
  // Starts the engine for the current context unless tierrt is off; returns
  // the running engine or null. Safe from any thread; only the first call
  // reads the environment.
  static Engine* start() noexcept;
  // The settings read at start, or null when tierrt is off or not started.
  static const Settings* settings_if_read() noexcept;

  alloc::Allocator& allocator() noexcept { return *alloc_; }
  const Settings& settings() const noexcept { return settings_; }
  CaptureTracker& captures() noexcept { return captures_; }

  // True when the calling thread's current context is the engine's.
  bool on_engine_context() const noexcept;

  CUresult allocate(CUdeviceptr* out, size_t bytes, CUstream stream) noexcept;
  // False when ptr is not tierrt's (the caller forwards to the driver).
  bool free(CUdeviceptr ptr, CUstream stream, CUresult* result) noexcept;

  // Blocks a launch names: every 8-byte-aligned word of its parameters.
  void collect_launch(CUfunction f, void** params, void** extra, BlockList& out) noexcept;
  // Blocks a copy or memset names: the blocks holding [ptr, ptr + bytes).
  void collect_range(CUdeviceptr ptr, size_t bytes, BlockList& out) noexcept;

  // Around the driver call that enqueues work using `blocks` on `stream`.
  CUresult before_use(const BlockList& blocks, CUstream stream) noexcept;
  void after_use(const BlockList& blocks, CUstream stream, bool enqueued) noexcept;

  // The virtual view for TIERRT_VIRTUAL_MEMINFO: device budget plus host tier.
  void virtual_meminfo(size_t* free_bytes, size_t* total_bytes) noexcept;

  // A launch went out on `stream` naming `blocks` (counted, and recorded
  // when TIERRT_RECORD is on).
  void note_launch(const BlockList& blocks, CUstream stream) noexcept;
  void note_step() noexcept;
  void note_phase(int phase) noexcept;
  void note_sync(CUstream stream, bool all_streams) noexcept;
  std::uint64_t launches() const noexcept { return launches_.load(); }
  std::uint64_t steps() const noexcept { return steps_.load(); }
  std::uint64_t live_bytes() const noexcept { return live_bytes_.load(); }
  std::uint64_t peak_live_bytes() const noexcept { return peak_live_bytes_.load(); }
  const PolicyThread* planner() const noexcept { return policy_.get(); }
  const MoveFeedback& moves() const noexcept { return *feedback_; }

 private:
  Engine(const Settings& s, std::unique_ptr<alloc::Allocator> a, CUcontext ctx);
  void add_live(std::int64_t delta) noexcept;
  void sample(SampleKind kind, std::uint64_t ptr, std::uint64_t bytes) noexcept;
  // An event for whoever listens: the recording and the planner.
  void emit(const policy::Event& e) noexcept;
  bool listening() const noexcept { return policy_ || (recorder_ && recorder_->events_on()); }
  static void after_fork_in_child() noexcept;
  static void at_exit() noexcept;

  static std::atomic<Engine*> g_active;

  Settings settings_;
  std::unique_ptr<alloc::Allocator> alloc_;
  CUcontext ctx_;
  ParamLayouts layouts_;
  CaptureTracker captures_;
  std::unique_ptr<Recorder> recorder_;  // null unless TIERRT_RECORD or TIERRT_TRACE
  std::unique_ptr<PolicyThread> policy_;  // null unless TIERRT_POLICY=planner
  std::unique_ptr<MoveFeedback> feedback_;  // the allocator's observer
  std::atomic<std::uint64_t> launches_{0}, steps_{0};
  std::atomic<std::uint64_t> live_bytes_{0}, peak_live_bytes_{0};
};

}  // namespace tierrt
