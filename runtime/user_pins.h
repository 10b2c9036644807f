// Pins the application took with tierrt_advise(PIN), counted apart from the
// pins launches hold while they are enqueued: an UNPIN releases only a pin
// the application took, never a launch's. Not on a hot path (advice is rare);
// a free asks only when some block is pinned.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "allocator/allocator.h"

namespace tierrt {

class UserPins {
 public:
  explicit UserPins(alloc::Allocator& allocator) noexcept : allocator_(allocator) {}

  // Makes `b` resident and keeps it so until as many unpin() calls.
  CUresult pin(alloc::Block* b) noexcept;
  // False when the application holds no pin on `b`.
  bool unpin(alloc::Block* b) noexcept;
  // `b` is being freed: the pins the application still holds on it end.
  void drop(alloc::Block* b) noexcept {
    if (pinned_blocks_.load(std::memory_order_relaxed) != 0) drop_pinned(b);
  }

 private:
  void drop_pinned(alloc::Block* b) noexcept;
  alloc::Allocator& allocator_;
  std::mutex mu_;
  std::unordered_map<const alloc::Block*, std::uint32_t> count_;  // guarded by mu_
  std::atomic<std::size_t> pinned_blocks_{0};                     // count_.size(), read without mu_
};

}  // namespace tierrt
