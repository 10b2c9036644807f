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
  // Noise, drawn afresh in every step from one seeded generator (noise that
  // repeated identically each step would be structure, not noise):
  // `noise_transients` extra random-size short-lived allocations, each with one
  // launch, at each of three points of every layer (after attention and after
  // the MLP in forward, after the layer's backward); each pair of adjacent
  // independent launches (Q/K/V projections, MLP gate/up) swapped with
  // probability `reorder_probability`; each launch's duration scaled by a
  // uniform factor in [1 - duration_jitter, 1 + duration_jitter].
  std::uint32_t noise_transients = 0;
  double reorder_probability = 0;
  double duration_jitter = 0;
  std::uint64_t seed = 1;
};

Trace synthesize(const SynthOptions& options);

}  // namespace tierrt::policy
