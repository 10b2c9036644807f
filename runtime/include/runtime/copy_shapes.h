// The device memory a copy, memset or stream memory operation touches, read
// from the driver's own descriptors: a 2D or 3D copy touches its rows, not
// the gaps between them. Host and array operands touch no device memory
// tierrt tracks and come out empty.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace tierrt {

// `slices` slices `slice_pitch` bytes apart, each `rows` rows of `width`
// bytes `pitch` apart, from `ptr`. Empty when ptr or width is 0.
struct StridedRange {
  CUdeviceptr ptr = 0;
  std::size_t width = 0;
  std::size_t rows = 1;
  std::size_t pitch = 0;
  std::size_t slices = 1;
  std::size_t slice_pitch = 0;

  bool empty() const noexcept { return ptr == 0 || width == 0 || rows == 0 || slices == 0; }
};

inline StridedRange contiguous(CUdeviceptr ptr, std::size_t bytes) noexcept { return {ptr, bytes, 1, bytes, 1, bytes}; }

StridedRange copy_source(const CUDA_MEMCPY2D& c) noexcept;
StridedRange copy_destination(const CUDA_MEMCPY2D& c) noexcept;
StridedRange copy_source(const CUDA_MEMCPY3D& c) noexcept;
StridedRange copy_destination(const CUDA_MEMCPY3D& c) noexcept;
StridedRange copy_source(const CUDA_MEMCPY3D_PEER& c) noexcept;
StridedRange copy_destination(const CUDA_MEMCPY3D_PEER& c) noexcept;
// A pointer operand of cuMemcpy3DBatchAsync; between pointers an element is
// one byte, against a CUDA array it is the array's, counted here as the
// largest a CUDA array has (four 32-bit channels).
StridedRange copy_source(const CUDA_MEMCPY3D_BATCH_OP& op) noexcept;
StridedRange copy_destination(const CUDA_MEMCPY3D_BATCH_OP& op) noexcept;
// cuMemsetD2D*: `height` rows of `width` elements of `element_bytes`.
StridedRange memset_2d(CUdeviceptr dst, std::size_t pitch, std::size_t width, std::size_t height,
                       std::size_t element_bytes) noexcept;
// The word a stream memory operation waits on or writes; empty for a flush
// or a barrier.
StridedRange memory_operation_target(const CUstreamBatchMemOpParams& op) noexcept;

}  // namespace tierrt
