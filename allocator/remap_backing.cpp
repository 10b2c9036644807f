#include "remap_backing.h"

#include <algorithm>

#include "driver/driver.h"

namespace tierrt::alloc {

bool RemapBacking::supported(const DeviceArena& arena, CUmemLocation* where) noexcept {
  const CUdevice dev = arena.device();
  int host_vmm = 0, numa_vmm = 0, numa_id = -1;
  // Some 12.x drivers answer CUDA_ERROR_INVALID_VALUE for these: unsupported.
  if (TIERRT_CU(cuDeviceGetAttribute, &host_vmm, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                dev) != CUDA_SUCCESS)
    host_vmm = 0;
  if (TIERRT_CU(cuDeviceGetAttribute, &numa_vmm,
                CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS)
    numa_vmm = 0;
  if (TIERRT_CU(cuDeviceGetAttribute, &numa_id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev) != CUDA_SUCCESS)
    numa_id = -1;
  if (!host_vmm && !numa_vmm) return false;
  where->type = numa_vmm && numa_id >= 0 ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_HOST;
  where->id = where->type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? numa_id : 0;
  HostTier probe;
  probe.set_location(where->type, where->id);
  CUmemGenericAllocationHandle h = 0;
  if (probe.create_host_chunk(arena.granularity(), &h) != CUDA_SUCCESS) return false;
  (void)TIERRT_CU(cuMemRelease, h);  // a probe: nothing depends on its release
  return true;
}

RemapBacking::RemapBacking(DeviceArena& arena, std::uint64_t budget, CUmemLocation where) noexcept
    : HostBacking(arena, budget), where_(where) {
  tier_.set_location(where.type, where.id);
  tier_.set_spare_limit(std::min<std::uint64_t>(1ull << 30, budget / 4));
}

CUresult RemapBacking::map_host(CUdeviceptr va, std::size_t bytes, CUmemGenericAllocationHandle h) noexcept {
  return arena_.map(va, bytes, h, &where_);
}

CUresult RemapBacking::prepare_spill(Block* b, HostCopy* to) noexcept {
  // The shadow VA stays with the block for its life; only the thread moving
  // the block touches it.
  CUresult r = CUDA_SUCCESS;
  if (b->shadow == 0) {
    CUdeviceptr shadow = 0;
    if ((r = arena_.reserve_address(b->mapped, &shadow)) == CUDA_SUCCESS) b->shadow = shadow;
  }
  if (r == CUDA_SUCCESS) r = tier_.take_host_chunk(b->mapped, &to->chunk);
  if (r != CUDA_SUCCESS) {
    to->chunk = 0;
    return r;
  }
  bool stuck = false;
  if ((r = arena_.map(b->shadow, b->mapped, to->chunk, &where_, &stuck)) != CUDA_SUCCESS) {
    release_host_chunk(b, to->chunk, !stuck);
    to->chunk = 0;
  }
  return r;
}

CUresult RemapBacking::copy_to_host(const Block& b, const HostCopy& to, CUstream s) noexcept {
  return TIERRT_CU(cuMemcpyAsync, b.shadow, b.va, to.size, s);
}

CUresult RemapBacking::leave_device(Block* b, const HostCopy& to) noexcept {
  CUresult r = DeviceArena::unmap(b->va, b->mapped);
  if (r != CUDA_SUCCESS) return r;  // still on the device chunk
  if ((r = map_host(b->va, b->mapped, to.chunk)) == CUDA_SUCCESS) {
    b->va_on_host = true;
    return r;
  }
  if (arena_.map(b->va, b->mapped, b->dev) == CUDA_SUCCESS) return r;  // back on the device chunk
  // Neither: the copy holds every byte, so the block is spilled with nothing
  // at its VA, as in copy mode; its next use fetches it.
  return CUDA_SUCCESS;
}

CUresult RemapBacking::enter_host(Block* b, const HostCopy& to) noexcept {
  const CUresult r = map_host(b->va, b->mapped, to.chunk);
  b->va_on_host = r == CUDA_SUCCESS;
  return r;
}

CUresult RemapBacking::enter_device(Block* b, CUmemGenericAllocationHandle dev) noexcept {
  if (b->va_on_host) {
    const CUresult r = DeviceArena::unmap(b->va, b->mapped);
    if (r != CUDA_SUCCESS) return r;  // still on the host copy
    b->va_on_host = false;
  }
  const CUresult r = arena_.map(b->va, b->mapped, dev);
  if (r != CUDA_SUCCESS) remap_host(b);
  return r;
}

CUresult RemapBacking::copy_to_device(const Block& b, CUstream s) noexcept {
  return TIERRT_CU(cuMemcpyAsync, b.va, b.shadow, b.size, s);
}

CUresult RemapBacking::undo_enter_device(Block* b) noexcept {
  const CUresult r = DeviceArena::unmap(b->va, b->mapped);
  if (r == CUDA_SUCCESS) remap_host(b);
  return r;
}

void RemapBacking::remap_host(Block* b) noexcept {
  b->va_on_host = map_host(b->va, b->mapped, b->host.chunk) == CUDA_SUCCESS;
}

void RemapBacking::release_host_chunk(Block* b, CUmemGenericAllocationHandle h, bool unmapped) noexcept {
  if (unmapped) {
    tier_.give_host_chunk(h, b->mapped);
    return;
  }
  // Still mapped at the shadow: the driver frees it once unmapped, and the
  // block's next spill takes a new shadow.
  tier_.release_host_chunk(h, b->mapped);
  b->shadow = 0;
}

void RemapBacking::release(Block* b, HostCopy* c) noexcept {
  if (c->chunk != 0) release_host_chunk(b, c->chunk, DeviceArena::unmap(b->shadow, b->mapped) == CUDA_SUCCESS);
  budget_.release(c->bytes);
  *c = HostCopy{};
}

void RemapBacking::destroy(Block* b) noexcept {
  if (b->va_on_host) (void)DeviceArena::unmap(b->va, b->mapped);  // the range is freed next regardless
  b->va_on_host = false;
  release(b, &b->host);
  if (b->shadow != 0) arena_.free_address(b->shadow, b->mapped);
  b->shadow = 0;
}

}  // namespace tierrt::alloc
