// The event model: everything the policy engine learns from. The runtime (or a
// trace file, or the synthesizer) produces these; nothing here names a CUDA type.
#pragma once

#include <cstdint>
#include <vector>

namespace tierrt::policy {

using BlockId = std::uint64_t;
using LaunchSeq = std::uint64_t;
using StreamId = std::uint32_t;

// Numeric values are part of the trace format (docs/trace-format.md): never reorder.
enum class EventKind : std::uint8_t {
  Alloc = 1,     // a = block, b = bytes
  Free = 2,      // a = block
  Launch = 3,    // a = launch sequence number, b = measured time until the next launch (ns)
  Use = 4,       // a = block, b = launch sequence number that named it
  Sync = 5,      // stream (or all streams when stream == kAllStreams) synchronised
  Step = 6,      // explicit step marker; a = step index given by the framework
  Phase = 7,     // sub = Phase
  CopyRate = 8,  // sub = CopyDir, a = measured bytes per second
  Tag = 9,       // a = block, b = layer, sub = Role (synthesized traces; optional)
};

enum class Phase : std::uint8_t { Forward = 0, Backward = 1, Optimizer = 2, Eval = 3, Other = 4 };
enum class CopyDir : std::uint8_t { DeviceToHost = 0, HostToDevice = 1 };

// What a tensor is, as a framework would name it. Only synthesized traces carry
// roles; the classifier never reads them (they are ground truth for tests and the
// names that framework-integrated baselines such as JAX's offload policy select by).
enum class Role : std::uint8_t {
  Unknown = 0,
  Weight, Gradient, OptimizerState, Workspace,
  LayerInput, NormOutput, NormStats, Query, Key, Value, AttentionOutput, SoftmaxStats,
  MlpUp, MlpGate, MlpActivation, MlpProduct, RouterOutput, ExpertInput, ExpertActivation,
  Logits, Temporary,
};
// Roles take the values 0 .. kRoleCount - 1 (a Tag event's sub-field is one of them).
inline constexpr std::uint8_t kRoleCount = static_cast<std::uint8_t>(Role::Temporary) + 1;

inline constexpr StreamId kAllStreams = 0xffffffffu;
// An Alloc's sub-field: a granule-group member (tierrt's runtime, TIERRT_GRANULE_BYTES).
inline constexpr std::uint8_t kAllocLazy = 1;
inline constexpr std::uint32_t kNoLayer = 0xffffffffu;

// One fixed-size record; the meaning of a and b depends on kind (see EventKind).
struct Event {
  EventKind kind{};
  std::uint8_t sub = 0;
  StreamId stream = 0;
  std::uint64_t a = 0;
  std::uint64_t b = 0;

  // `lazy`: the block holds no memory until work names it, and starts on the
  // host (no copy) where the device has no room then (kAllocLazy).
  static Event alloc(BlockId block, std::uint64_t bytes, StreamId s = 0, bool lazy = false) {
    return {EventKind::Alloc, lazy ? kAllocLazy : std::uint8_t{0}, s, block, bytes};
  }
  static Event free(BlockId block, StreamId s = 0) { return {EventKind::Free, 0, s, block, 0}; }
  static Event launch(LaunchSeq seq, std::uint64_t duration_ns, StreamId s = 0) {
    return {EventKind::Launch, 0, s, seq, duration_ns};
  }
  static Event use(BlockId block, LaunchSeq seq, StreamId s = 0) {
    return {EventKind::Use, 0, s, block, seq};
  }
  static Event sync(StreamId s = kAllStreams) { return {EventKind::Sync, 0, s, 0, 0}; }
  static Event step(std::uint64_t index) { return {EventKind::Step, 0, 0, index, 0}; }
  static Event phase(Phase p) { return {EventKind::Phase, static_cast<std::uint8_t>(p), 0, 0, 0}; }
  static Event copy_rate(CopyDir d, std::uint64_t bytes_per_s) {
    return {EventKind::CopyRate, static_cast<std::uint8_t>(d), 0, bytes_per_s, 0};
  }
  static Event tag(BlockId block, Role role, std::uint32_t layer) {
    return {EventKind::Tag, static_cast<std::uint8_t>(role), 0, block, layer};
  }

  friend bool operator==(const Event&, const Event&) = default;
};

using Trace = std::vector<Event>;

const char* to_string(EventKind kind);

}  // namespace tierrt::policy
