// The per-layer structure that framework-integrated baselines act on: the saved
// tensors of each layer (from the framework's own names) and where that layer's
// forward and backward passes begin and end.
#pragma once

#include <cstdint>
#include <vector>

#include "policies/idle_gap.hpp"
#include "policies/step_timeline.hpp"

namespace tierrt::policy {

struct LayerGroup {
  std::uint32_t tag = 0;          // the Tag layer value (micro-batch and layer)
  std::uint32_t layer_index = 0;  // layer within the model
  std::vector<std::uint32_t> blocks;  // saved tensors with an idle gap
  std::vector<IdleGap> gaps;          // parallel to blocks
  std::uint32_t fwd_first = 0, fwd_last = 0, bwd_first = 0;
  std::uint32_t prev_in_backward = 0;  // group whose backward runs just before (itself for the first)
  std::uint32_t next_in_forward = 0;   // group whose forward runs just after (itself for the last)
};

// Groups in forward order. Layer tags encode micro-batch * kLayersPerMicroBatch + layer.
inline constexpr std::uint32_t kLayersPerMicroBatch = 65536;
std::vector<LayerGroup> layer_groups(const StepTimeline& tl);

}  // namespace tierrt::policy
