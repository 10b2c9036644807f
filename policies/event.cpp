#include "policies/event.hpp"

namespace tierrt::policy {

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

}  // namespace tierrt::policy
