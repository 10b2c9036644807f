// Copies and memsets as stream work, shared by the copy entry points and the
// graph's memcpy and memset nodes. Any copy or memset whose source or
// destination lives in host memory (pageable, pinned, or a HOST/HOST_NUMA
// handle mapped at a device address) crosses the link: it runs on the copy
// engine of its direction, at the modeled link rate.
#pragma once

#include "stream.h"

namespace simdev {

Work copy_work(uint64_t dst, uint64_t src, size_t n);
// `height` rows of `width` elements of `elem` bytes, `pitch` bytes apart.
Work memset_work(uint64_t dst, size_t pitch, uint32_t value, unsigned elem, size_t width, size_t height);
// A CUDA_MEMCPY3D between linear memory (arrays are not modelled).
CUresult memcpy3d_work(const CUDA_MEMCPY3D& p, Work* out);

}  // namespace simdev
