// Copy spilling: the host copy is a pinned buffer from the private jemalloc
// arena (its chunks on the device's NUMA node where it names one), and the
// block's VA stays reserved but unmapped while it is spilled.
#pragma once

#include "host_backing.h"

namespace tierrt::alloc {

class CopyBacking final : public HostBacking {
 public:
  CopyBacking(DeviceArena& arena, std::uint64_t budget, std::uint64_t pinned_chunk) noexcept;
  SpillMode mode() const noexcept override { return SpillMode::Copy; }

  CUresult prepare_spill(Block* b, HostCopy* to) noexcept override;
  CUresult copy_to_host(const Block& b, const HostCopy& to, CUstream s) noexcept override;
  CUresult leave_device(Block* b, const HostCopy& to) noexcept override;
  CUresult enter_device(Block* b, CUmemGenericAllocationHandle dev) noexcept override;
  CUresult copy_to_device(const Block& b, CUstream s) noexcept override;
  CUresult undo_enter_device(Block* b) noexcept override;
  void release(Block* b, HostCopy* c) noexcept override;
  void destroy(Block* b) noexcept override;

 private:
  std::uint64_t host_bytes(const Block& b) const noexcept override { return b.size; }
};

}  // namespace tierrt::alloc
