// The step a policy runs when it adds launches to the compute stream: recomputes
// (each remade tensor is freed after its last forward use and made again by a launch
// just before its layer's backward pass, reading the layer's kept tensors) and
// copies a framework queues on the compute stream (PyTorch's save_on_cpu). The
// model then charges their time to the compute stream and their memory to the device.
#pragma once

#include <cstdint>
#include <vector>

#include "policies/eval/policy.hpp"

namespace tierrt::policy {

struct AddedLaunch {
  enum class Kind : std::uint8_t { Recompute, StreamCopy };
  Kind kind = Kind::Recompute;
  std::uint32_t before_op = 0;        // the recorded launch it runs just before
  std::vector<std::uint32_t> remade;  // Recompute: saved tensors made again here
  std::vector<std::uint32_t> reads;   // what it reads: kept tensors, parameters, the copied tensor
  double ns = 0;                      // its time on the compute stream
};

// Remade tensors' second lives are new blocks (ordinals after the step's own); both
// lives are tagged Temporary and classed Transient, since neither is saved across
// the forward/backward gap any more. Launch indices shift by the launches added
// before them; a block freed before launch k is freed before what is added there,
// and one allocated before launch k after it.
ExecutedStep with_added_launches(const StepTimeline& tl, const std::vector<AddedLaunch>& added);

}  // namespace tierrt::policy
