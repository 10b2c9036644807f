#include "runtime/copy_shapes.h"

namespace tierrt {

namespace {

bool on_device(CUmemorytype t) noexcept { return t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED; }

// One operand of a 2D or 3D copy: where its first row starts, and how its
// rows and slices are laid out. A unified operand's address is in the
// device field, as for a device one.
StridedRange operand(CUmemorytype type, CUdeviceptr base, std::size_t x, std::size_t y, std::size_t z,
                     std::size_t pitch, std::size_t height, std::size_t width, std::size_t rows,
                     std::size_t slices) noexcept {
  if (!on_device(type) || base == 0) return {};
  const std::size_t slice_pitch = pitch * height;
  return {base + z * slice_pitch + y * pitch + x, width, rows, pitch, slices, slice_pitch};
}

constexpr std::size_t kLargestArrayElement = 16;

StridedRange batch_operand(const CUmemcpy3DOperand& o, const CUmemcpy3DOperand& other,
                           const CUextent3D& extent) noexcept {
  if (o.type != CU_MEMCPY_OPERAND_TYPE_POINTER || o.op.ptr.ptr == 0) return {};
  const std::size_t element = other.type == CU_MEMCPY_OPERAND_TYPE_POINTER ? 1 : kLargestArrayElement;
  const std::size_t row_elements = o.op.ptr.rowLength ? o.op.ptr.rowLength : extent.width;
  const std::size_t layer_rows = o.op.ptr.layerHeight ? o.op.ptr.layerHeight : extent.height;
  const std::size_t pitch = row_elements * element;
  return {o.op.ptr.ptr, extent.width * element, extent.height, pitch, extent.depth, pitch * layer_rows};
}

}  // namespace

StridedRange copy_source(const CUDA_MEMCPY2D& c) noexcept {
  return operand(c.srcMemoryType, c.srcDevice, c.srcXInBytes, c.srcY, 0, c.srcPitch, 0, c.WidthInBytes, c.Height, 1);
}
StridedRange copy_destination(const CUDA_MEMCPY2D& c) noexcept {
  return operand(c.dstMemoryType, c.dstDevice, c.dstXInBytes, c.dstY, 0, c.dstPitch, 0, c.WidthInBytes, c.Height, 1);
}

StridedRange copy_source(const CUDA_MEMCPY3D& c) noexcept {
  return operand(c.srcMemoryType, c.srcDevice, c.srcXInBytes, c.srcY, c.srcZ, c.srcPitch, c.srcHeight,
                 c.WidthInBytes, c.Height, c.Depth);
}
StridedRange copy_destination(const CUDA_MEMCPY3D& c) noexcept {
  return operand(c.dstMemoryType, c.dstDevice, c.dstXInBytes, c.dstY, c.dstZ, c.dstPitch, c.dstHeight,
                 c.WidthInBytes, c.Height, c.Depth);
}

StridedRange copy_source(const CUDA_MEMCPY3D_PEER& c) noexcept {
  return operand(c.srcMemoryType, c.srcDevice, c.srcXInBytes, c.srcY, c.srcZ, c.srcPitch, c.srcHeight,
                 c.WidthInBytes, c.Height, c.Depth);
}
StridedRange copy_destination(const CUDA_MEMCPY3D_PEER& c) noexcept {
  return operand(c.dstMemoryType, c.dstDevice, c.dstXInBytes, c.dstY, c.dstZ, c.dstPitch, c.dstHeight,
                 c.WidthInBytes, c.Height, c.Depth);
}

StridedRange copy_source(const CUDA_MEMCPY3D_BATCH_OP& op) noexcept { return batch_operand(op.src, op.dst, op.extent); }
StridedRange copy_destination(const CUDA_MEMCPY3D_BATCH_OP& op) noexcept {
  return batch_operand(op.dst, op.src, op.extent);
}

StridedRange memset_2d(CUdeviceptr dst, std::size_t pitch, std::size_t width, std::size_t height,
                       std::size_t element_bytes) noexcept {
  return {dst, width * element_bytes, height, pitch, 1, pitch * height};
}

StridedRange memory_operation_target(const CUstreamBatchMemOpParams& op) noexcept {
  switch (op.operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32: return contiguous(op.waitValue.address, 4);
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: return contiguous(op.waitValue.address, 8);
    case CU_STREAM_MEM_OP_WRITE_VALUE_32: return contiguous(op.writeValue.address, 4);
    case CU_STREAM_MEM_OP_WRITE_VALUE_64: return contiguous(op.writeValue.address, 8);
    default: return {};
  }
}

}  // namespace tierrt
