// Finding the training step in an event stream. Explicit Step markers win; without
// them the step is the period of the token sequence over which memory returns to
// where it started (a transformer layer repeats too, but it leaves its activations
// behind, so it is not mistaken for a step; under gradient accumulation a micro-
// step does return memory, but the optimizer step between groups of them recurs
// only at the whole step's period, which therefore covers more). Steps that
// differ from the learned one (an eval step, a changed shape) get their own shape
// id. When exact repeats explain little of the stream, the period is looked for
// again among the tokens that recur at all, with slack (noise: extra temporaries,
// reordered launches).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "policies/event.hpp"
#include "policies/step_tokens.hpp"

namespace tierrt::policy {

struct StepSpan {
  std::size_t begin_event = 0;   // [begin_event, end_event) in the trace
  std::size_t end_event = 0;
  std::size_t begin_token = 0;   // [begin_token, end_token) in StepDetection::tokens
  std::size_t end_token = 0;
  std::uint64_t signature = 0;   // hash of the step's tokens: equal steps, equal signature
  std::uint32_t shape = 0;       // dense id per distinct signature, in order of appearance
  bool prologue = false;         // set-up before the first step (weights, optimizer state)
};

struct StepDetection {
  std::vector<Token> tokens;
  std::vector<StepSpan> spans;     // in trace order, prologue first when there is one
  bool used_markers = false;
  std::size_t period_tokens = 0;   // detected period of the first repeating step (0: none)
  std::uint32_t dominant_shape = 0;
  // The steps repeat only up to noise (found with slack): every step found has
  // the dominant shape, though their signatures differ.
  bool noisy = false;

  std::vector<std::uint64_t> token_hashes(const StepSpan& s) const;
  std::size_t step_count() const;  // spans that are not the prologue
};

struct StepDetectorOptions {
  std::size_t kgram = 8;           // tokens per fingerprint when collecting period candidates
  std::size_t max_candidates = 64; // most frequent repeat distances tried as periods
  std::size_t min_period = 8;      // shorter repeats are kernels or layers, not steps
  // When exact repeats cover less than half the stream: tokens that recur at all,
  // up to this many tokens off (0: exact repeats only).
  std::size_t slack = 4;
};

StepDetection detect_steps(const Trace& trace, const StepDetectorOptions& options = {});

// The same on tokens already made (event indices into `trace`), e.g. by an online
// Tokenizer that knew the sizes of blocks allocated before `trace` begins.
StepDetection detect_steps(std::span<const Event> trace, std::vector<Token> tokens,
                           const StepDetectorOptions& options = {});

// The signature of a step from its token hashes (what StepSpan::signature holds).
std::uint64_t step_signature(std::span<const std::uint64_t> tokens);

}  // namespace tierrt::policy
