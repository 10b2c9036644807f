// Device tensors allocated and freed one by one, stream-ordered, as an eager
// framework does (cuMemAllocAsync / cuMemFreeAsync), with the bytes the
// program holds counted. An allocation the device cannot satisfy ends the
// program with one line saying so and exit status kOutOfMemoryExit.
#pragma once

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include <string>
#include <unordered_map>

#include "driver_api.h"

namespace trainer {

constexpr int kOutOfMemoryExit = 3;

class DeviceMemory {
 public:
  explicit DeviceMemory(const Driver& d);

  // The step being run, for the out-of-memory message (0: set-up).
  void set_step(unsigned step) { step_ = step; }

  float* allocate(size_t count, CUstream stream, const std::string& what);
  void free(const float* p, CUstream stream);

  uint64_t live_bytes() const { return live_; }
  uint64_t peak_bytes() const { return peak_; }
  // Highest device memory in use (total - free, from cuMemGetInfo) seen
  // after an allocation: what the device really held, whoever held it.
  uint64_t peak_device_in_use() const { return peak_in_use_; }
  uint64_t device_total() const { return total_; }

 private:
  const Driver& d_;
  std::unordered_map<CUdeviceptr, size_t> sizes_;
  uint64_t live_ = 0, peak_ = 0, peak_in_use_ = 0, total_ = 0;
  unsigned step_ = 0;
};

}  // namespace trainer
