// The host budget of a process with an engine per device: every engine's
// spills hold their bytes here as well as in the engine's own budget, so
// that together they never pin more than TIERRT_HOST_BUDGET (and, with a
// node budget, the node ledger's share after that).
#pragma once

#include <atomic>
#include <cstdint>

#include "allocator/host_share.h"

namespace tierrt {

class ProcessHostShare final : public alloc::HostShare {
 public:
  // `node`: the node ledger, or null.
  ProcessHostShare(std::uint64_t limit, alloc::HostShare* node) noexcept : limit_(limit), node_(node) {}
  bool try_reserve(std::uint64_t bytes) noexcept override;
  void release(std::uint64_t bytes) noexcept override;
  std::uint64_t used() const noexcept { return used_.load(std::memory_order_relaxed); }
  std::uint64_t limit() const noexcept { return limit_; }

 private:
  const std::uint64_t limit_;
  alloc::HostShare* const node_;
  std::atomic<std::uint64_t> used_{0};  // invariant: used_ <= limit_
};

}  // namespace tierrt
