// Where a spilled block's bytes live, and what becomes of its address
// meanwhile. One interface, two implementations:
// - RemapBacking: the bytes go to a host physical chunk and the VA is
//   remapped onto it, so work the runtime never saw still reads the right
//   bytes (over the link);
// - CopyBacking: the bytes go to a pinned buffer from the private jemalloc
//   arena and the VA is left unmapped.
// The mover sequences a move; the backing does what differs between them.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>

#include "allocator/allocator.h"
#include "allocator/block.h"
#include "device_arena.h"
#include "host_budget.h"
#include "host_tier.h"

namespace tierrt::alloc {

class HostBacking {
 public:
  // Remap where host VMM works, unless Copy was asked for; else Copy.
  static std::unique_ptr<HostBacking> create(const Options& opt, DeviceArena& arena) noexcept;
  virtual ~HostBacking() = default;
  HostBacking(const HostBacking&) = delete;
  HostBacking& operator=(const HostBacking&) = delete;

  virtual SpillMode mode() const noexcept = 0;

  // Holds what a spill of `b` takes against the host budget (false: full),
  // and the size the copy will hold (HostCopy::size). Under alloc.blocks.
  bool reserve(const Block& b, HostCopy* to) noexcept;
  // Before a spill's copy: where the bytes go (`to` is reserved). Out of
  // memory: the host tier is full.
  virtual CUresult prepare_spill(Block* b, HostCopy* to) noexcept = 0;
  // Copies `to.size` bytes: the block's size at the claim, never its size
  // now (HostCopy::size).
  virtual CUresult copy_to_host(const Block& b, const HostCopy& to, CUstream s) noexcept = 0;
  // Once the spill's copy completed: the VA leaves its device chunk (remap:
  // for the host copy; Block::va_on_host says whether that worked, else
  // nothing is mapped there and the block is spilled as in copy mode). On
  // failure the VA stays on the device chunk.
  virtual CUresult leave_device(Block* b, const HostCopy& to) noexcept = 0;
  // A VA nothing was ever mapped at (an untouched group member) onto its
  // host copy `to` (prepared), as if it had been spilled. Remap only.
  virtual CUresult enter_host(Block*, const HostCopy&) noexcept { return CUDA_ERROR_NOT_SUPPORTED; }
  // A fetch: the VA onto device chunk `dev`. On failure `dev` is not mapped
  // there and the VA is where a spilled block's is (remap: back on the host
  // copy, if the driver allows; va_on_host says).
  virtual CUresult enter_device(Block* b, CUmemGenericAllocationHandle dev) noexcept = 0;
  virtual CUresult copy_to_device(const Block& b, CUstream s) noexcept = 0;
  // Undoes enter_device after the fetch's copy could not be enqueued. On
  // failure the device chunk is still mapped at the VA (and must be kept).
  virtual CUresult undo_enter_device(Block* b) noexcept = 0;
  // Gives back a host copy nobody needs any more, with its budget share.
  virtual void release(Block* b, HostCopy* c) noexcept = 0;
  // At a block's destruction: everything it holds on the host side (its VA
  // is unmapped from a host copy first).
  virtual void destroy(Block* b) noexcept = 0;

  const Budget& budget() const noexcept { return budget_; }
  std::uint64_t pinned_pool_bytes() const noexcept { return tier_.pinned_pool_bytes(); }
  void fill_placement(Stats* s) const noexcept { tier_.fill_placement(s); }

 protected:
  HostBacking(DeviceArena& arena, std::uint64_t budget) noexcept : arena_(arena), budget_(budget) {}
  virtual std::uint64_t host_bytes(const Block& b) const noexcept = 0;

  DeviceArena& arena_;
  HostTier tier_;
  HostBudget budget_;
};

}  // namespace tierrt::alloc
