// Human-readable names for the enums, used in tool output and error messages.
#include "policies/event.hpp"
#include "policies/lifetime_class.hpp"

namespace tierrt::policy {

const char* to_string(Role role) {
  switch (role) {
    case Role::Unknown: return "unknown";
    case Role::Weight: return "weight";
    case Role::Gradient: return "gradient";
    case Role::OptimizerState: return "optimizer-state";
    case Role::Workspace: return "workspace";
    case Role::LayerInput: return "layer-input";
    case Role::NormOutput: return "norm-output";
    case Role::NormStats: return "norm-stats";
    case Role::Query: return "query";
    case Role::Key: return "key";
    case Role::Value: return "value";
    case Role::AttentionOutput: return "attention-output";
    case Role::SoftmaxStats: return "softmax-stats";
    case Role::MlpUp: return "mlp-up";
    case Role::MlpGate: return "mlp-gate";
    case Role::MlpActivation: return "mlp-activation";
    case Role::MlpProduct: return "mlp-product";
    case Role::RouterOutput: return "router-output";
    case Role::ExpertInput: return "expert-input";
    case Role::ExpertActivation: return "expert-activation";
    case Role::Logits: return "logits";
    case Role::Temporary: return "temporary";
    case Role::Count_: break;
  }
  return "invalid";
}

const char* to_string(EventKind kind) {
  switch (kind) {
    case EventKind::Alloc: return "alloc";
    case EventKind::Free: return "free";
    case EventKind::Launch: return "launch";
    case EventKind::Use: return "use";
    case EventKind::Sync: return "sync";
    case EventKind::Step: return "step";
    case EventKind::Phase: return "phase";
    case EventKind::CopyRate: return "copy-rate";
    case EventKind::Tag: return "tag";
  }
  return "invalid";
}

const char* to_string(LifetimeClass c) {
  switch (c) {
    case LifetimeClass::Persistent: return "persistent";
    case LifetimeClass::Activation: return "activation";
    case LifetimeClass::Transient: return "transient";
    case LifetimeClass::Workspace: return "workspace";
  }
  return "invalid";
}

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
    case Role::Count_:
      break;
  }
  return LifetimeClass::Transient;
}

}  // namespace tierrt::policy
