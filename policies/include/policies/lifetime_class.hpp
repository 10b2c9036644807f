// The four lifetime classes the policy engine reasons about (docs/design.md).
#pragma once

#include <cstdint>

namespace tierrt::policy {

enum class LifetimeClass : std::uint8_t {
  Persistent,  // lives across steps: weights, gradients, optimizer state
  Activation,  // written in the forward pass, idle, read again in the backward pass
  Transient,   // freed soon after its last use
  Workspace,   // scratch that nearly every kernel touches: never idle for long
};

// The class's name in reports ("persistent", "activation", ...).
const char* to_string(LifetimeClass c);

}  // namespace tierrt::policy
