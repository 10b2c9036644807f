// Pointer queries about memory tierrt handed out. The application asked for
// an allocation; what backs its address changes (a device chunk, a host
// chunk, nothing at all while spilled in copy mode; a slab holds many
// allocations), so the answers come from what was allocated, and are those
// the driver gives for an untiered cuMemAlloc of the same size.
#include <cstring>

#include "driver/driver.h"
#include "runtime/engine.h"
#include "runtime/ipc_shim.h"

namespace tierrt {

int Engine::current_device_ordinal() noexcept {
  CUdevice dev = 0;
  return TIERRT_CU(cuCtxGetDevice, &dev) == CUDA_SUCCESS ? static_cast<int>(dev) : 0;
}

Engine::Allocation Engine::allocation_at(CUdeviceptr p, AllocationRecord* out) const noexcept {
  if (records_.find(p, out)) return Allocation::Live;
  return alloc_->owns(p) ? Allocation::Gone : Allocation::NotOurs;
}

Engine::PointerAnswer Engine::tracked_attribute(CUpointer_attribute attr, CUdeviceptr p, void* data) noexcept {
  AllocationRecord rec;
  switch (allocation_at(p, &rec)) {
    case Allocation::Live: break;
    case Allocation::Gone: return PointerAnswer::Invalid;
    case Allocation::NotOurs: return PointerAnswer::Driver;
  }
  auto answer = [&](auto value) {
    std::memcpy(data, &value, sizeof value);
    return PointerAnswer::Answered;
  };
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return answer(ctx_);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return answer(device_ordinal_);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: return answer(static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: return answer(p);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return PointerAnswer::Invalid;  // device memory has none
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return answer(rec.base);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return answer(rec.bytes);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: return answer(rec.buffer_id);
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: return answer(0u);
    case CU_POINTER_ATTRIBUTE_MAPPED: return answer(1u);
    // Unset, as for any cuMemAlloc allocation (cuPointerSetAttribute, which
    // sets it, is not tierrt's).
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: return answer(0u);
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      return answer(static_cast<unsigned>(CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE));
    // cuIpcGetMemHandle of tierrt's memory exports its chunk as a POSIX fd
    // (runtime/ipc_shim.h): capable where the device makes such chunks.
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: return answer(ipc::exportable_memory() ? 1u : 0u);
    // A block's mapping is its own whatever backs it; a slab slot's is the
    // slab's, as the driver says of its own small allocations.
    // A granule group's members are one allocation's one mapping to the
    // application, as cuMemAlloc's would be.
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      if (const alloc::Block* b = alloc_->lookup(p)) return answer(b->group ? b->group->va : b->va);
      return PointerAnswer::Driver;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      if (const alloc::Block* b = alloc_->lookup(p)) return answer(b->group ? b->group->mapped : b->mapped);
      return PointerAnswer::Driver;
    default: return PointerAnswer::Driver;
  }
}

void Engine::clear_attribute(CUpointer_attribute attr, void* data) noexcept {
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: std::memset(data, 0, 8); return;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: std::memset(data, 0, sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS)); return;
    default: std::memset(data, 0, 4); return;
  }
}

}  // namespace tierrt
