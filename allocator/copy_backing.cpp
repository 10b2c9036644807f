#include "copy_backing.h"

#include <cassert>

#include "driver/driver.h"

namespace tierrt::alloc {

CopyBacking::CopyBacking(DeviceArena& arena, std::uint64_t budget, std::uint64_t pinned_chunk) noexcept
    : HostBacking(arena, budget) {
  tier_.configure_pool(pinned_chunk, budget + pinned_chunk);
  // Pinned memory on the GPU's own NUMA node; a driver that does not know
  // the attribute names no node. Placed chunks are page-locked with
  // cuMemHostRegister, which a device may not support.
  int node = -1, can_register = 1;
  if (TIERRT_CU(cuDeviceGetAttribute, &node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, arena.device()) != CUDA_SUCCESS)
    node = -1;
  if (TIERRT_CU(cuDeviceGetAttribute, &can_register, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, arena.device()) !=
      CUDA_SUCCESS)
    can_register = 1;  // unknown: tried, and given up at the first refusal
  tier_.place_pinned_on(node, can_register != 0);
}

CUresult CopyBacking::prepare_spill(Block*, HostCopy* to) noexcept {
  to->buf = tier_.alloc_pinned(to->size);
  return to->buf != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CopyBacking::copy_to_host(const Block& b, const HostCopy& to, CUstream s) noexcept {
  return TIERRT_CU(cuMemcpyDtoHAsync, to.buf, b.va, to.size, s);
}

CUresult CopyBacking::leave_device(Block* b, const HostCopy&) noexcept {
  return DeviceArena::unmap(b->va, b->mapped);
}

CUresult CopyBacking::enter_device(Block* b, CUmemGenericAllocationHandle dev) noexcept {
  return arena_.map(b->va, b->mapped, dev);
}

CUresult CopyBacking::copy_to_device(const Block& b, CUstream s) noexcept {
  assert(b.host.size == b.size);  // a spilled block is never revived
  return TIERRT_CU(cuMemcpyHtoDAsync, b.va, b.host.buf, b.host.size, s);
}

CUresult CopyBacking::undo_enter_device(Block* b) noexcept { return DeviceArena::unmap(b->va, b->mapped); }

void CopyBacking::release(Block*, HostCopy* c) noexcept {
  if (c->buf != nullptr) tier_.free_pinned(c->buf);
  budget_.release(c->bytes);
  *c = HostCopy{};
}

void CopyBacking::destroy(Block* b) noexcept { release(b, &b->host); }

}  // namespace tierrt::alloc
