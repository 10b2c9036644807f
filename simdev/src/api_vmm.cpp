// Virtual memory management: reservations, physical handles, mappings.
#include "state.h"

using namespace simdev;

namespace {

CUresult check_prop(const CUmemAllocationProp* prop) {
  if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return valid_device(prop->location.id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA: {
      // A driver without host VMM takes HOST / HOST_NUMA for no allocation.
      if (!state().config.host_vmm) return CUDA_ERROR_INVALID_VALUE;
      // Host memory from cuMemCreate cannot be exported to other processes.
      if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_INVALID_VALUE;
      if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST) return CUDA_SUCCESS;
      // A node some device is attached to (0 where none has one).
      for (int node : state().config.host_numa_ids)
        if (prop->location.id >= 0 && prop->location.id == (node < 0 ? 0 : node)) return CUDA_SUCCESS;
      return CUDA_ERROR_INVALID_VALUE;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;  // HOST_NUMA_CURRENT and the rest
  }
}

bool on_host(const CUmemAllocationProp& prop) {
  return prop.location.type == CU_MEM_LOCATION_TYPE_HOST || prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
}

size_t granularity_of(const CUmemAllocationProp& prop) {
  uint64_t host = state().config.host_vmm_granularity;
  return on_host(prop) && host ? host : kGranularity;
}

}  // namespace

SIMDEV_API CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                          CUmemAllocationGranularity_flags option) {
  SIMDEV_ENTER("cuMemGetAllocationGranularity", CUDA_ERROR_INVALID_VALUE);
  if (!granularity) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_prop(prop)) return e;
  *granularity = granularity_of(*prop);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                                unsigned long long flags) {
  SIMDEV_ENTER("cuMemAddressReserve", CUDA_ERROR_OUT_OF_MEMORY);
  if (!ptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t base = 0;
  if (CUresult e = state().memory.reserve(size, alignment, addr, &base)) return e;
  *ptr = base;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  SIMDEV_ENTER("cuMemAddressFree", CUDA_ERROR_INVALID_VALUE);
  return state().memory.free_reservation(ptr, size);
}

SIMDEV_API CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                        const CUmemAllocationProp* prop, unsigned long long flags) {
  SIMDEV_ENTER("cuMemCreate", CUDA_ERROR_OUT_OF_MEMORY);
  if (!handle || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_prop(prop)) return e;
  if (size % granularity_of(*prop) != 0) return CUDA_ERROR_INVALID_VALUE;
  return state().memory.create(size, *prop, handle);
}

SIMDEV_API CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  SIMDEV_ENTER("cuMemRelease", CUDA_ERROR_INVALID_VALUE);
  return state().memory.release(handle);
}

SIMDEV_API CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                     CUmemGenericAllocationHandle handle, unsigned long long flags) {
  SIMDEV_ENTER("cuMemMap", CUDA_ERROR_OUT_OF_MEMORY);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // The reference allows an offset into the handle that is a multiple of the
  // granularity, but NVIDIA's driver (580, H200) refuses any offset, and an
  // address or size off the granularity, with NOT_SUPPORTED: simdev refuses
  // what the driver refuses.
  if (offset != 0) return CUDA_ERROR_NOT_SUPPORTED;
  CUmemAllocationProp prop{};
  if (state().memory.properties(handle, &prop) == CUDA_SUCCESS) {
    size_t g = granularity_of(prop);
    if (ptr % g || size % g) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return state().memory.map(ptr, size, offset, handle);
}

SIMDEV_API CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  SIMDEV_ENTER("cuMemUnmap", CUDA_ERROR_INVALID_VALUE);
  return state().memory.unmap(ptr, size);
}

SIMDEV_API CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  SIMDEV_ENTER("cuMemSetAccess", CUDA_ERROR_INVALID_VALUE);
  return state().memory.set_access(ptr, size, desc, count);
}

SIMDEV_API CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  SIMDEV_ENTER("cuMemGetAccess", CUDA_ERROR_INVALID_VALUE);
  if (!flags || !location) return CUDA_ERROR_INVALID_VALUE;
  return state().memory.get_access(flags, *location, ptr);
}

SIMDEV_API CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  SIMDEV_ENTER("cuMemRetainAllocationHandle", CUDA_ERROR_INVALID_VALUE);
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  return state().memory.retain(reinterpret_cast<uint64_t>(addr), handle);
}

SIMDEV_API CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                                   CUmemGenericAllocationHandle handle) {
  SIMDEV_ENTER("cuMemGetAllocationPropertiesFromHandle", CUDA_ERROR_INVALID_VALUE);
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = state().memory.properties(handle, prop)) return e;
  // Host memory is always on some NUMA node: NVIDIA's driver (580, H200)
  // reports a handle created for HOST as HOST_NUMA on its node.
  if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST) {
    int node = state().config.host_numa_id;
    prop->location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop->location.id = node < 0 ? 0 : node;
  }
  return CUDA_SUCCESS;
}
