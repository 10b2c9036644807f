// The four lifetime classes the policy engine reasons about (DESIGN.md, Policies).
#pragma once

#include <cstdint>

#include "policies/event.hpp"

namespace tierrt::policy {

enum class LifetimeClass : std::uint8_t {
  Persistent,  // lives across steps: weights, gradients, optimizer state
  Activation,  // written in the forward pass, idle, read again in the backward pass
  Transient,   // freed soon after its last use
  Workspace,   // scratch that nearly every kernel touches: never idle for long
};

const char* to_string(LifetimeClass c);

// The class a tensor of this role should get; the ground truth tests score the
// classifier against. Unknown maps to Transient (nothing known worth keeping).
LifetimeClass expected_class(Role role);

}  // namespace tierrt::policy
