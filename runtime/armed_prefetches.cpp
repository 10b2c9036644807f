#include "runtime/armed_prefetches.h"

#include <algorithm>

namespace tierrt {

bool ArmedPrefetches::arm(alloc::Block* b, CUdeviceptr va, std::uint64_t at) noexcept {
  Slot* free_slot = nullptr;
  for (Slot& s : slots_) {
    alloc::Block* armed = s.block.load(std::memory_order_acquire);
    if (armed == b) return false;
    if (armed == nullptr && free_slot == nullptr) free_slot = &s;
  }
  if (free_slot == nullptr) return false;
  // Nobody reads a slot's fields before its block is there (release).
  free_slot->at.store(at, std::memory_order_relaxed);
  free_slot->va.store(va, std::memory_order_relaxed);
  free_slot->block.store(b, std::memory_order_release);
  maybe_armed_ = true;
  return true;
}

void ArmedPrefetches::disarm_passed(std::uint64_t seq) noexcept {
  if (!maybe_armed_) return;
  for (Slot& s : slots_) {
    alloc::Block* b = s.block.load(std::memory_order_acquire);
    if (b != nullptr && s.at.load(std::memory_order_relaxed) < seq)
      s.block.compare_exchange_strong(b, nullptr, std::memory_order_acq_rel);
  }
}

void ArmedPrefetches::publish() noexcept {
  if (!maybe_armed_) return;  // next_due_ says none already
  std::uint64_t due = UINT64_MAX;
  for (const Slot& s : slots_)
    if (s.block.load(std::memory_order_acquire) != nullptr) due = std::min(due, s.at.load(std::memory_order_relaxed));
  if (next_due_.load(std::memory_order_relaxed) != due) next_due_.store(due, std::memory_order_release);
  maybe_armed_ = due != UINT64_MAX;
}

std::size_t ArmedPrefetches::armed() const noexcept {
  return static_cast<std::size_t>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) {
    return s.block.load(std::memory_order_acquire) != nullptr;
  }));
}

}  // namespace tierrt
