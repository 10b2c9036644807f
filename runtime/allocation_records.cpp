#include "runtime/allocation_records.h"

namespace tierrt {

bool AllocationRecords::add(CUdeviceptr base, std::size_t bytes) noexcept {
  std::lock_guard lock(mu_);
  try {
    by_base_.insert_or_assign(base, AllocationRecord{base, bytes, next_id_++});
    return true;
  } catch (...) {
    return false;
  }
}

void AllocationRecords::remove(CUdeviceptr base) noexcept {
  std::lock_guard lock(mu_);
  by_base_.erase(base);
}

bool AllocationRecords::find(CUdeviceptr p, AllocationRecord* out) const noexcept {
  std::lock_guard lock(mu_);
  auto it = by_base_.upper_bound(p);
  if (it == by_base_.begin()) return false;
  --it;
  if (p - it->second.base >= it->second.bytes) return false;
  *out = it->second;
  return true;
}

}  // namespace tierrt
