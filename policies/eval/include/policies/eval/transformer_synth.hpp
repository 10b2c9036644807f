// Synthesized training steps of a decoder-only transformer: the allocations, launches
// and uses a real step makes, with the tensors it saves for backward (layer input,
// norm outputs and statistics, Q/K/V, attention output and softmax statistics, MLP
// gate/up/activation/product; for MoE layers router logits and per-expert tensors),
// sizes from the model shape and compute time per launch from its FLOPs (or bytes,
// for memory-bound kernels). Every block is tagged with its role and layer, which
// the classifier ignores and the tests score it against.
#pragma once

#include <cstdint>
#include <optional>

#include "policies/eval/transformer_config.hpp"
#include "policies/event.hpp"

namespace tierrt::policy {

struct SynthOptions {
  ModelConfig model;
  RunShape shape;
  std::uint32_t steps = 3;
  bool step_markers = false;   // emit Step events (tierrt_mark_step)
  bool phase_markers = false;  // emit Phase events
  // An eval (forward-only, nothing saved) step after this many training steps.
  std::optional<std::uint32_t> eval_after;
  // From this step on, the sequence length changes to `changed_seq`.
  std::optional<std::uint32_t> change_after;
  std::uint32_t changed_seq = 0;
  // Noise: extra short-lived allocations per layer, and independent launches
  // (Q/K/V projections, MLP gate/up) in random order.
  std::uint32_t noise_transients = 0;
  bool reorder = false;
  double duration_jitter = 0;  // relative, uniform, per launch
  std::uint64_t seed = 1;
};

Trace synthesize(const SynthOptions& options);

}  // namespace tierrt::policy
