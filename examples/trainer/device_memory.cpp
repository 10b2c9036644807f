#include "device_memory.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace trainer {

DeviceMemory::DeviceMemory(const Driver& d) : d_(d) {
  size_t free = 0, total = 0;
  check(d_, d_.cuMemGetInfo(&free, &total), "cuMemGetInfo");
  total_ = total;
}

float* DeviceMemory::allocate(size_t count, CUstream stream, const std::string& what) {
  const size_t bytes = count * sizeof(float);
  CUdeviceptr p = 0;
  if (CUresult r = d_.cuMemAllocAsync(&p, bytes, stream); r != CUDA_SUCCESS) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "trainer: out of device memory: cuMemAllocAsync of %zu bytes for %s failed with %s %s "
                 "(the program holds %llu bytes; the device has %llu)\n",
                 bytes, what.c_str(), error_name(d_, r),
                 step_ ? ("in step " + std::to_string(step_)).c_str() : "while setting up",
                 static_cast<unsigned long long>(live_), static_cast<unsigned long long>(total_));
    std::exit(r == CUDA_ERROR_OUT_OF_MEMORY ? kOutOfMemoryExit : 1);
  }
  sizes_[p] = bytes;
  live_ += bytes;
  peak_ = std::max(peak_, live_);
  size_t free = 0, total = 0;
  check(d_, d_.cuMemGetInfo(&free, &total), "cuMemGetInfo");
  peak_in_use_ = std::max<uint64_t>(peak_in_use_, total - free);
  return reinterpret_cast<float*>(p);
}

void DeviceMemory::free(const float* p, CUstream stream) {
  const auto ptr = reinterpret_cast<CUdeviceptr>(p);
  auto it = sizes_.find(ptr);
  if (it == sizes_.end()) {
    std::fprintf(stderr, "trainer: freeing %p, which it never allocated\n", static_cast<const void*>(p));
    std::exit(1);
  }
  live_ -= it->second;
  sizes_.erase(it);
  check(d_, d_.cuMemFreeAsync(ptr, stream), "cuMemFreeAsync");
}

}  // namespace trainer
