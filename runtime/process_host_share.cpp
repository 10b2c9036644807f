#include "process_host_share.h"

#include <cassert>

namespace tierrt {

bool ProcessHostShare::try_reserve(std::uint64_t bytes) noexcept {
  std::uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ || used > limit_ - bytes) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  if (node_ == nullptr || node_->try_reserve(bytes)) return true;
  used_.fetch_sub(bytes, std::memory_order_relaxed);  // the node refused: nothing is held there
  return false;
}

void ProcessHostShare::release(std::uint64_t bytes) noexcept {
  [[maybe_unused]] const std::uint64_t before = used_.fetch_sub(bytes, std::memory_order_relaxed);
  assert(before >= bytes && "a release of bytes the process share never held");
  if (node_ != nullptr) node_->release(bytes);
}

}  // namespace tierrt
