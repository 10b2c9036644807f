// Tokens: the event stream reduced to what repeats from one training step to the
// next (allocation sizes, free sizes, launches and the sizes of what they touch).
// Block ids, launch sequence numbers and timings differ every step, so they are
// left out; step detection and plan following compare token sequences.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "policies/event.hpp"

namespace tierrt::policy {

struct Token {
  std::uint64_t hash = 0;
  std::uint32_t event = 0;        // index of the event that opened the token
  std::int64_t live_before = 0;   // bytes live just before this token's event
  std::int64_t live_after = 0;    // bytes live once this token's event has happened
};

// Online: the runtime can feed events as they arrive. A launch becomes a token only
// once its Use events are complete, i.e. when the next non-Use event arrives.
class Tokenizer {
 public:
  void feed(const Event& e, std::uint32_t index, std::vector<Token>& out);
  void finish(std::vector<Token>& out);
  // The events before `by` were dropped: a launch still open is `by` earlier.
  void rebase(std::uint32_t by) {
    if (launch_open_) launch_event_ -= by;
  }

 private:
  void flush_launch(std::vector<Token>& out);

  std::unordered_map<BlockId, std::uint64_t> sizes_;
  std::int64_t live_ = 0;
  bool launch_open_ = false;
  std::uint32_t launch_event_ = 0;
  std::uint32_t launch_stream_ = 0;
  std::uint64_t launch_uses_ = 0;
  std::uint64_t launch_use_bytes_ = 0;
};

std::vector<Token> tokenize(const Trace& trace);

// Length of the common prefix of two token sequences: a step followed against the
// token sequence of a learned step deviates at the first token that differs, and
// from then on the plan must not be used.
std::size_t common_prefix(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b);

}  // namespace tierrt::policy
