// What tierrt observes, kept for after the run: the policy event stream
// (TIERRT_RECORD, in the trace format tierrt-replay reads) and residency
// samples over time (TIERRT_TRACE, a Chrome / Perfetto JSON trace).
//
// Both buffers are reserved up front (pages are touched only as they fill),
// so recording on the launch path is an atomic increment and a store.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "allocator/block.h"
#include "policies/event.hpp"

namespace tierrt {

struct ResidencySample {
  std::uint64_t ns;            // since the recorder started
  std::uint8_t kind;           // SampleKind
  std::uint64_t ptr, bytes;
  std::uint64_t device_used, host_used;
};

// Launches: every 256th launch (ptr: its stream's id). Spill and Fetch: a
// copy that completed (ptr: its duration in ns). DemandFetch: ptr is the
// block. LateFetch: ptr is how long the launch waited, in ns.
enum class SampleKind : std::uint8_t { Alloc, Free, Step, Phase, Launches, Spill, Fetch, DemandFetch, LateFetch };

class Recorder {
 public:
  // Either path may be empty (that half stays off).
  Recorder(const std::string& events_path, const std::string& trace_path);
  bool events_on() const noexcept { return events_ != nullptr; }
  bool samples_on() const noexcept { return samples_ != nullptr; }

  void event(const policy::Event& e) noexcept;
  // A launch and the blocks it named. The launch's duration field is filled
  // in when the next launch arrives (time between launches, as measured).
  void launch(policy::LaunchSeq seq, policy::StreamId stream, std::span<alloc::Block* const> blocks) noexcept;
  // Durations measured on the device after the launches were recorded
  // (launches [from, to) took `ns` each); they win over the host's.
  void set_launch_durations(policy::LaunchSeq from, policy::LaunchSeq to, std::uint64_t ns) noexcept;
  void sample(SampleKind kind, std::uint64_t ptr, std::uint64_t bytes, std::uint64_t device_used,
              std::uint64_t host_used) noexcept;
  // A sample that carries no memory counters (the mover's, which does not
  // know them).
  void mark(SampleKind kind, std::uint64_t ptr, std::uint64_t bytes) noexcept;
  std::uint64_t now_ns() const noexcept;
  // The device budget, drawn as a counter beside device and host bytes.
  void set_budget(std::uint64_t bytes) noexcept { budget_.store(bytes, std::memory_order_relaxed); }
  // Says once, in one log line, that the trace is full and records no more;
  // called off the launch path (the sampler thread, and write()).
  void say_if_full() noexcept;

  // Writes both files; returns false (after logging one line each) on failure.
  bool write() noexcept;

 private:
  static constexpr std::uint64_t kMaxEvents = 1ull << 23;   // 192 MiB of address space
  static constexpr std::uint64_t kMaxSamples = 1ull << 20;  // 48 MiB
  std::string events_path_, trace_path_;
  policy::Event* events_ = nullptr;
  ResidencySample* samples_ = nullptr;
  std::atomic<std::uint64_t> n_events_{0}, n_samples_{0};
  std::atomic<std::uint64_t> last_launch_index_{UINT64_MAX}, last_launch_ns_{0};
  // Where recent launches are in events_ (index + 1), by sequence number.
  static constexpr std::uint64_t kLaunchRing = 1u << 14;
  std::unique_ptr<std::atomic<std::uint64_t>[]> launch_at_;
  std::uint64_t start_ns_ = 0;
  std::atomic<std::uint64_t> budget_{0};
  std::atomic<bool> said_full_{false};
};

}  // namespace tierrt
