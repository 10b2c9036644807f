// What a recomputing baseline makes again in each layer's backward pass, from what,
// and at what cost: the layer's input is always kept (it is what the wrapped layer
// function receives), tensors a rule keeps stay saved, everything else the layer
// saved is recomputed. Needs the framework's view of the step (Tag roles).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "added_launches.hpp"
#include "policies/step_timeline.hpp"

namespace tierrt::policy {

enum class RecomputeCost {
  // The wrapped layer's whole forward pass runs again (PyTorch's checkpoint re-runs
  // the function it wraps).
  WholeForward,
  // Only the launches the recomputed tensors need, back to kept tensors (XLA prunes
  // the rematerialized computation to what backward reads).
  NeededLaunches,
};

// One Recompute launch per layer, before the layer's first backward launch. Its own
// temporaries (a projection's output before the residual add) are not allocated:
// tens of MiB per layer, which flatters the recomputing baselines slightly.
// `keep`: saved tensors besides the layer input that stay saved (on the device or
// offloaded). Layers without a tagged input (the head) recompute nothing.
std::vector<AddedLaunch> layer_recomputes(const StepTimeline& tl, const std::function<bool(Role)>& keep,
                                             RecomputeCost cost);

}  // namespace tierrt::policy
