#include "runtime/nccl_registrations.h"

namespace tierrt {

bool NcclRegistrations::add(void* handle, std::vector<PinnedForNccl> pins) noexcept {
  std::lock_guard lock(mu_);
  try {
    by_handle_.insert_or_assign(handle, std::move(pins));
    return true;
  } catch (...) {
    return false;
  }
}

std::vector<PinnedForNccl> NcclRegistrations::take(void* handle) noexcept {
  std::lock_guard lock(mu_);
  auto it = by_handle_.find(handle);
  if (it == by_handle_.end()) return {};
  std::vector<PinnedForNccl> pins = std::move(it->second);
  by_handle_.erase(it);
  return pins;
}

}  // namespace tierrt
