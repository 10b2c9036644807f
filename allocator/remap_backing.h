// Remap spilling: the host copy is a host physical chunk, mapped at a second
// VA (the shadow) for the copies and, while the block is spilled, at the
// block's own VA, so that any access still works, over the link.
#pragma once

#include "host_backing.h"

namespace tierrt::alloc {

class RemapBacking final : public HostBacking {
 public:
  // Whether host VMM works on the arena's device: creates a host chunk at
  // the location it should (the device's NUMA node where known).
  static bool supported(const DeviceArena& arena, CUmemLocation* where) noexcept;

  RemapBacking(DeviceArena& arena, std::uint64_t budget, CUmemLocation where) noexcept;
  SpillMode mode() const noexcept override { return SpillMode::Remap; }

  CUresult prepare_spill(Block* b, HostCopy* to) noexcept override;
  CUresult copy_to_host(const Block& b, const HostCopy& to, CUstream s) noexcept override;
  CUresult leave_device(Block* b, const HostCopy& to) noexcept override;
  CUresult enter_host(Block* b, const HostCopy& to) noexcept override;
  CUresult enter_device(Block* b, CUmemGenericAllocationHandle dev) noexcept override;
  CUresult copy_to_device(const Block& b, CUstream s) noexcept override;
  CUresult undo_enter_device(Block* b) noexcept override;
  void release(Block* b, HostCopy* c) noexcept override;
  void destroy(Block* b) noexcept override;

 private:
  std::uint64_t host_bytes(const Block& b) const noexcept override { return b.mapped; }
  // Maps the host chunk at `va`, for the device and the host.
  CUresult map_host(CUdeviceptr va, std::size_t bytes, CUmemGenericAllocationHandle h) noexcept;
  // Puts the block's (unmapped) VA back on its host copy; va_on_host says
  // whether that worked.
  void remap_host(Block* b) noexcept;
  // A host chunk back to the spares once it is unmapped from the shadow;
  // one still mapped there is released, and the block drops that shadow.
  void release_host_chunk(Block* b, CUmemGenericAllocationHandle h, bool unmapped) noexcept;

  CUmemLocation where_;
};

}  // namespace tierrt::alloc
