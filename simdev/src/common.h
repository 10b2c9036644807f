// Shared by every simdev source: cuda.h seen the way NVIDIA builds its own
// driver, so that every exported name (base, _v2, _ptsz, _ptds) is declared
// and each definition below is checked against its prototype.
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <cstddef>
#include <cstdint>

#define SIMDEV_API extern "C" __attribute__((visibility("default")))

namespace simdev {

// 2 MiB, like the driver reports for device memory on current GPUs.
inline constexpr size_t kGranularity = size_t{2} << 20;

inline bool aligned_to(uint64_t v, uint64_t a) { return a != 0 && v % a == 0; }
inline uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace simdev
