// The lifetime class a tensor of a known role should get: the ground truth the
// tests score the classifier against, and what framework-integrated baselines
// take as the step's activations.
#pragma once

#include "policies/event.hpp"
#include "policies/lifetime_class.hpp"

namespace tierrt::policy {

// Unknown maps to Transient (nothing known worth keeping).
LifetimeClass expected_class(Role role);

}  // namespace tierrt::policy
