#include "runtime/user_pins.h"

namespace tierrt {

CUresult UserPins::pin(alloc::Block* b) noexcept {
  alloc::Block* one[] = {b};
  if (CUresult r = allocator_.ensure_resident(one, CU_STREAM_LEGACY)) return r;
  std::lock_guard lock(mu_);
  try {
    ++count_[b];
  } catch (...) {
    allocator_.release(one);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pinned_blocks_.store(count_.size(), std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

bool UserPins::unpin(alloc::Block* b) noexcept {
  alloc::Block* one[] = {b};
  std::lock_guard lock(mu_);
  auto it = count_.find(b);
  if (it == count_.end()) return false;
  if (--it->second == 0) count_.erase(it);
  pinned_blocks_.store(count_.size(), std::memory_order_relaxed);
  allocator_.release(one);
  return true;
}

void UserPins::drop_pinned(alloc::Block* b) noexcept {
  alloc::Block* one[] = {b};
  std::lock_guard lock(mu_);
  auto it = count_.find(b);
  if (it == count_.end()) return;
  for (std::uint32_t i = 0; i < it->second; ++i) allocator_.release(one);
  count_.erase(it);
  pinned_blocks_.store(count_.size(), std::memory_order_relaxed);
}

}  // namespace tierrt
