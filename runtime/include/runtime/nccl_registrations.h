// Buffers an application registered with NCCL (ncclCommRegister): NCCL may
// have handed their device memory to a network card or mapped it into
// another process, so their blocks keep their device memory (a user pin)
// until the registration ends.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "allocator/ranked_mutex.h"
#include "runtime/lock_rank.h"
#include "allocator/block.h"

namespace tierrt {

struct PinnedForNccl {
  alloc::Block* block = nullptr;
  unsigned long long buffer_id = 0;  // the allocation the pin was taken for
};

class NcclRegistrations {
 public:
  // False when there was no memory to remember them.
  bool add(void* handle, std::vector<PinnedForNccl> pins) noexcept;
  // The pins registration `handle` took; empty when unknown.
  std::vector<PinnedForNccl> take(void* handle) noexcept;

 private:
  RankedMutex mu_{kRankNccl, "runtime.nccl"};  // a leaf: nothing is taken inside it
  std::unordered_map<void*, std::vector<PinnedForNccl>> by_handle_;
};

}  // namespace tierrt
