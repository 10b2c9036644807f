// The host budget: the process's own, and when the process shares host
// memory with others (Options::host_share), that share too. A reservation
// holds both or neither.
#pragma once

#include <cstdint>

#include "allocator/host_share.h"
#include "budget.h"

namespace tierrt::alloc {

class HostBudget : public Budget {
 public:
  explicit HostBudget(std::uint64_t limit) noexcept : Budget(limit) {}
  // Before the first reservation.
  void set_share(HostShare* share) noexcept { share_ = share; }

  // The share first: a reservation it refuses never shows in this budget's
  // peak.
  bool try_reserve(std::uint64_t n) noexcept {
    if (share_ != nullptr && !share_->try_reserve(n)) return false;
    if (Budget::try_reserve(n)) return true;
    if (share_ != nullptr) share_->release(n);
    return false;
  }
  void release(std::uint64_t n) noexcept {
    Budget::release(n);
    if (share_ != nullptr && n != 0) share_->release(n);
  }

 private:
  HostShare* share_ = nullptr;
};

}  // namespace tierrt::alloc
