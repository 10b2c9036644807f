// Occupancy queries, answered as a device with simdev's modeled limits
// (the values cuDeviceGetAttribute reports, SIMDEV_ATTRS overrides included)
// would answer them. A block occupies whole warps of its SM's thread slots,
// one of its block slots, and its dynamic shared memory plus the per-block
// reservation, rounded up to the allocation unit. Host kernels have no
// register count and no static shared memory, so registers never limit.
#include <algorithm>

#include "code_handles.h"
#include "state.h"

using namespace simdev;

namespace {

// Shared memory is handed to blocks in units of this many bytes.
constexpr long long kSharedAllocationUnit = 128;

struct SmLimits {
  int sm_count, warp, threads_per_sm, blocks_per_sm, threads_per_block;
  long long shared_per_sm, reserved_per_block;
  // What a function may use without raising CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
  long long dynamic_shared_per_block;
};

CUresult sm_limits(SmLimits* out) {
  struct {
    CUdevice_attribute attr;
    long long* wide;
    int* narrow;
  } wanted[] = {
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, nullptr, &out->sm_count},
      {CU_DEVICE_ATTRIBUTE_WARP_SIZE, nullptr, &out->warp},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, nullptr, &out->threads_per_sm},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, nullptr, &out->blocks_per_sm},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, nullptr, &out->threads_per_block},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, &out->shared_per_sm, nullptr},
      {CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, &out->reserved_per_block, nullptr},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, &out->dynamic_shared_per_block, nullptr},
  };
  for (auto& w : wanted) {
    int v = 0;
    if (CUresult e = device_attribute(w.attr, &v)) return e;
    if (w.wide) *w.wide = v;
    else *w.narrow = v;
  }
  if (out->warp <= 0 || out->threads_per_sm <= 0 || out->blocks_per_sm <= 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

int active_blocks(const SmLimits& l, int block_size, size_t dynamic_shared) {
  if (block_size <= 0 || block_size > l.threads_per_block) return 0;
  if (dynamic_shared > static_cast<size_t>(l.dynamic_shared_per_block)) return 0;
  long long warps_per_block = (block_size + l.warp - 1) / l.warp;
  long long blocks = std::min<long long>(l.blocks_per_sm, (l.threads_per_sm / l.warp) / warps_per_block);
  long long shared = static_cast<long long>(dynamic_shared) + l.reserved_per_block;
  shared = (shared + kSharedAllocationUnit - 1) / kSharedAllocationUnit * kSharedAllocationUnit;
  if (shared > 0) blocks = std::min(blocks, l.shared_per_sm / shared);
  return static_cast<int>(blocks);
}

CUresult check_flags(unsigned flags) {
  return flags == CU_OCCUPANCY_DEFAULT || flags == CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE ? CUDA_SUCCESS
                                                                                        : CUDA_ERROR_INVALID_VALUE;
}

CUresult max_active_blocks(int* num_blocks, CUfunction f, int block_size, size_t dynamic_shared, unsigned flags) {
  if (!num_blocks || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_flags(flags)) return e;
  if (!launchable_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  SmLimits l;
  if (CUresult e = sm_limits(&l)) return e;
  *num_blocks = active_blocks(l, block_size, dynamic_shared);
  return CUDA_SUCCESS;
}

// Tries block sizes from the largest allowed down, one warp at a time, asking
// the callback (when given) for each one's dynamic shared memory, and keeps
// the one that runs the most threads per SM (the larger on a tie); stops
// once an SM is full.
CUresult max_potential_block_size(int* min_grid, int* block_size, CUfunction f, CUoccupancyB2DSize shared_for,
                                  size_t dynamic_shared, int limit, unsigned flags) {
  if (!min_grid || !block_size || limit < 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_flags(flags)) return e;
  if (!launchable_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  SmLimits l;
  if (CUresult e = sm_limits(&l)) return e;
  int largest = limit > 0 ? std::min(limit, l.threads_per_block) : l.threads_per_block;
  int best_size = 0, best_blocks = 0;
  long long best_threads = 0;
  for (int aligned = (largest + l.warp - 1) / l.warp * l.warp; aligned > 0; aligned -= l.warp) {
    int size = std::min(largest, aligned);
    size_t shared = shared_for ? shared_for(size) : dynamic_shared;
    int blocks = active_blocks(l, size, shared);
    if (static_cast<long long>(blocks) * size > best_threads) {
      best_threads = static_cast<long long>(blocks) * size;
      best_size = size;
      best_blocks = blocks;
    }
    if (best_threads >= l.threads_per_sm) break;
  }
  *block_size = best_size;
  *min_grid = best_blocks * l.sm_count;
  return CUDA_SUCCESS;
}

}  // namespace

SIMDEV_API CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* num_blocks, CUfunction f, int block_size,
                                                                        size_t dynamic_shared) {
  SIMDEV_ENTER_CTX("cuOccupancyMaxActiveBlocksPerMultiprocessor", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)ctx;
  return max_active_blocks(num_blocks, f, block_size, dynamic_shared, CU_OCCUPANCY_DEFAULT);
}

SIMDEV_API CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* num_blocks, CUfunction f,
                                                                                 int block_size,
                                                                                 size_t dynamic_shared,
                                                                                 unsigned int flags) {
  SIMDEV_ENTER_CTX("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)ctx;
  return max_active_blocks(num_blocks, f, block_size, dynamic_shared, flags);
}

SIMDEV_API CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int* min_grid, int* block_size, CUfunction f,
                                                             CUoccupancyB2DSize shared_for, size_t dynamic_shared,
                                                             int limit) {
  SIMDEV_ENTER_CTX("cuOccupancyMaxPotentialBlockSize", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)ctx;
  return max_potential_block_size(min_grid, block_size, f, shared_for, dynamic_shared, limit, CU_OCCUPANCY_DEFAULT);
}

SIMDEV_API CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int* min_grid, int* block_size, CUfunction f,
                                                                      CUoccupancyB2DSize shared_for,
                                                                      size_t dynamic_shared, int limit,
                                                                      unsigned int flags) {
  SIMDEV_ENTER_CTX("cuOccupancyMaxPotentialBlockSizeWithFlags", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)ctx;
  return max_potential_block_size(min_grid, block_size, f, shared_for, dynamic_shared, limit, flags);
}

SIMDEV_API CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamic_shared, CUfunction f,
                                                                    int num_blocks, int block_size) {
  SIMDEV_ENTER_CTX("cuOccupancyAvailableDynamicSMemPerBlock", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)ctx;
  if (!dynamic_shared || num_blocks <= 0 || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!launchable_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  SmLimits l;
  if (CUresult e = sm_limits(&l)) return e;
  *dynamic_shared = 0;
  if (active_blocks(l, block_size, 0) < num_blocks) return CUDA_SUCCESS;  // they do not fit even without it
  long long share = l.shared_per_sm / num_blocks / kSharedAllocationUnit * kSharedAllocationUnit;
  long long available = std::min(share - l.reserved_per_block, l.dynamic_shared_per_block);
  *dynamic_shared = static_cast<size_t>(std::max(0LL, available));
  return CUDA_SUCCESS;
}
