// Pointer attributes, for device VA and pinned host memory alike (UVA).
#include <cstring>

#include "state.h"

using namespace simdev;

namespace {

// Fills one attribute; INVALID_VALUE when the attribute does not apply.
CUresult attribute(CUpointer_attribute attr, const Resolved& r, uint64_t ptr, Context* ctx, void* data) {
  bool device = r.kind == Resolved::kDeviceMapped;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(ctx);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = r.range_base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = r.range_size;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = r.buffer_id;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<unsigned*>(data) = 1;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      *static_cast<unsigned*>(data) = 1;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      *static_cast<unsigned*>(data) = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      *static_cast<unsigned*>(data) = 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

SIMDEV_API CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  SIMDEV_ENTER_CTX("cuPointerGetAttribute", CUDA_ERROR_INVALID_VALUE, ctx);
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  Resolved r = state().memory.resolve(ptr);
  if (r.kind != Resolved::kDeviceMapped && r.kind != Resolved::kPinnedHost) return CUDA_ERROR_INVALID_VALUE;
  return attribute(attr, r, ptr, ctx, data);
}

SIMDEV_API CUresult CUDAAPI cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attrs, void** data,
                                                   CUdeviceptr ptr) {
  SIMDEV_ENTER_CTX("cuPointerGetAttributes", CUDA_ERROR_INVALID_VALUE, ctx);
  if (count && (!attrs || !data)) return CUDA_ERROR_INVALID_VALUE;
  Resolved r = state().memory.resolve(ptr);
  bool known = r.kind == Resolved::kDeviceMapped || r.kind == Resolved::kPinnedHost;
  for (unsigned i = 0; i < count; ++i) {
    if (!data[i]) return CUDA_ERROR_INVALID_VALUE;
    if (known && attribute(attrs[i], r, ptr, ctx, data[i]) == CUDA_SUCCESS) continue;
    // Not a pointer the driver knows (or not applicable): a null answer, as
    // documented, rather than an error. Sizes follow each attribute's type.
    size_t bytes = attrs[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE || attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
                           attrs[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                           attrs[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER || attrs[i] == CU_POINTER_ATTRIBUTE_CONTEXT ||
                           attrs[i] == CU_POINTER_ATTRIBUTE_BUFFER_ID
                       ? 8
                       : 4;
    std::memset(data[i], 0, bytes);
  }
  return CUDA_SUCCESS;
}
