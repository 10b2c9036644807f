// Host memory this process shares with others (the ranks of a node): a
// spill holds its bytes here as well as in its own host budget, and a
// refusal is the host tier being full.
#pragma once

#include <cstdint>

namespace tierrt::alloc {

class HostShare {
 public:
  // Holds `bytes` if they fit; false when the shared budget is full.
  virtual bool try_reserve(std::uint64_t bytes) noexcept = 0;
  virtual void release(std::uint64_t bytes) noexcept = 0;

 protected:
  ~HostShare() = default;
};

}  // namespace tierrt::alloc
