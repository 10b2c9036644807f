#include "policies/lifetime_class.hpp"

namespace tierrt::policy {

const char* to_string(LifetimeClass c) {
  switch (c) {
    case LifetimeClass::Persistent: return "persistent";
    case LifetimeClass::Activation: return "activation";
    case LifetimeClass::Transient: return "transient";
    case LifetimeClass::Workspace: return "workspace";
  }
  return "invalid";
}

}  // namespace tierrt::policy
