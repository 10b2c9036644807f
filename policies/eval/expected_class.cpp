#include "expected_class.hpp"

namespace tierrt::policy {

LifetimeClass expected_class(Role role) {
  switch (role) {
    case Role::Weight:
    case Role::Gradient:
    case Role::OptimizerState:
      return LifetimeClass::Persistent;
    case Role::Workspace:
      return LifetimeClass::Workspace;
    case Role::LayerInput:
    case Role::NormOutput:
    case Role::NormStats:
    case Role::Query:
    case Role::Key:
    case Role::Value:
    case Role::AttentionOutput:
    case Role::SoftmaxStats:
    case Role::MlpUp:
    case Role::MlpGate:
    case Role::MlpActivation:
    case Role::MlpProduct:
    case Role::RouterOutput:
    case Role::ExpertInput:
    case Role::ExpertActivation:
    case Role::Logits:
      return LifetimeClass::Activation;
    case Role::Unknown:
    case Role::Temporary:
      break;
  }
  return LifetimeClass::Transient;
}

}  // namespace tierrt::policy
