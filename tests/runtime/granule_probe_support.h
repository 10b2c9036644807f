// What the granule-group probes share (granule_xla_probe.cpp,
// granule_caching_probe.cpp): two kernels on simdev that write and check
// every word of a buffer, tierrt's API looked up at run time, and the line
// each probe ends with: its peak device memory and its step time.
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <vector>

#include "simdev/simdev.h"
#include "tierrt/tierrt.h"

namespace granule_probe {

inline std::uint32_t word_of(std::uint32_t seed, std::size_t i) {
  return seed * 2654435761u ^ static_cast<std::uint32_t>(i * 40503u);
}

// produce(out, words, seed, ws): out[i] = word_of(seed, i) for every word;
// the workspace's first word is written (every kernel uses it).
inline void produce_kernel(const simdev_launch* l) {
  auto* out = *static_cast<std::uint32_t* const*>(l->params[0]);
  const std::size_t n = *static_cast<const std::size_t*>(l->params[1]);
  const std::uint32_t seed = *static_cast<const std::uint32_t*>(l->params[2]);
  auto* ws = *static_cast<std::uint32_t* const*>(l->params[3]);
  for (std::size_t i = 0; i < n; ++i) out[i] = word_of(seed, i);
  ws[0] = seed;
}

// consume(in, words, seed, ws, bad): *bad += words of `in` that are not
// word_of(seed, i); the workspace's first word is read and written.
inline void consume_kernel(const simdev_launch* l) {
  auto* in = *static_cast<std::uint32_t* const*>(l->params[0]);
  const std::size_t n = *static_cast<const std::size_t*>(l->params[1]);
  const std::uint32_t seed = *static_cast<const std::uint32_t*>(l->params[2]);
  auto* ws = *static_cast<std::uint32_t* const*>(l->params[3]);
  auto* bad = *static_cast<std::uint64_t* const*>(l->params[4]);
  std::uint64_t differ = 0;
  for (std::size_t i = 0; i < n; ++i) differ += in[i] != word_of(seed, i);
  *bad += differ;
  ws[0] += 1;
}

struct Kernels {
  CUfunction produce = nullptr, consume = nullptr;
};

// Registers both kernels (each busy `kernel_ns` on the device's clock) and
// makes device 0's primary context current; false off simdev.
inline bool set_up(Kernels* k, unsigned long long kernel_ns) {
  static const std::size_t produce_sizes[] = {8, 8, 4, 8}, consume_sizes[] = {8, 8, 4, 8, 8};
  const simdev_kernel_desc p{"granule_produce", &produce_kernel, 4, produce_sizes, nullptr, kernel_ns};
  const simdev_kernel_desc c{"granule_consume", &consume_kernel, 5, consume_sizes, nullptr, kernel_ns};
  if (simdev_try_register_kernel(&p) != 0 || simdev_try_register_kernel(&c) != 0) return false;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUmodule m = nullptr;
  return cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
         cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS &&
         cuModuleLoadData(&m, "simdev") == CUDA_SUCCESS &&
         cuModuleGetFunction(&k->produce, m, "granule_produce") == CUDA_SUCCESS &&
         cuModuleGetFunction(&k->consume, m, "granule_consume") == CUDA_SUCCESS;
}

inline CUresult produce(const Kernels& k, CUstream s, CUdeviceptr out, std::size_t words, std::uint32_t seed,
                        CUdeviceptr ws) {
  void* params[] = {&out, &words, &seed, &ws};
  return cuLaunchKernel(k.produce, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
}

inline CUresult consume(const Kernels& k, CUstream s, CUdeviceptr in, std::size_t words, std::uint32_t seed,
                        CUdeviceptr ws, CUdeviceptr bad) {
  void* params[] = {&in, &words, &seed, &ws, &bad};
  return cuLaunchKernel(k.consume, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
}

inline tierrt_stats stats() {
  tierrt_stats s{};
  s.struct_size = sizeof s;
  if (auto get = reinterpret_cast<int (*)(tierrt_stats*)>(dlsym(RTLD_DEFAULT, "tierrt_get_stats"))) (void)get(&s);
  return s;
}

inline void mark_step() {
  if (auto mark = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "tierrt_mark_step"))) mark();
}

inline void mark_phase(tierrt_phase p) {
  if (auto mark = reinterpret_cast<void (*)(tierrt_phase)>(dlsym(RTLD_DEFAULT, "tierrt_mark_phase"))) mark(p);
}

inline double now_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// The median of the step times after the first `warmup` steps.
inline double median_step_ms(std::vector<double> ms, std::size_t warmup) {
  ms.erase(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(std::min(warmup, ms.size())));
  if (ms.empty()) return 0;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The probe's last line, which the test script reads.
inline void report(const char* name, std::uint64_t bad_words, const std::vector<double>& step_ms,
                   std::size_t warmup) {
  const tierrt_stats s = stats();
  std::printf("%s: bad_words=%llu peak_device_mib=%.1f peak_untiered_mib=%.1f step_ms=%.2f spilled_mib=%.1f "
              "fetched_mib=%.1f demand_fetches=%llu\n",
              name, static_cast<unsigned long long>(bad_words), s.device_peak_bytes / 1048576.0,
              s.peak_bytes_untiered / 1048576.0, median_step_ms(step_ms, warmup), s.bytes_spilled / 1048576.0,
              s.bytes_fetched / 1048576.0, static_cast<unsigned long long>(s.demand_fetches));
}

inline bool ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::printf("FAIL: %s: %s\n", what, name ? name : "?");
  return false;
}

// Both programs' arguments: STEPS LAYERS ACTIVATION_MIB KERNEL_US (10, 12,
// 8, 2000 when absent), then each program's own.
struct Shape {
  int steps = 10, layers = 12;
  std::size_t act = 8u << 20;
  unsigned long long kernel_ns = 2000 * 1000;
};
inline Shape shape_of(int argc, char** argv) {
  Shape s;
  if (argc > 1) s.steps = std::atoi(argv[1]);
  if (argc > 2) s.layers = std::atoi(argv[2]);
  if (argc > 3) s.act = std::strtoull(argv[3], nullptr, 10) << 20;
  if (argc > 4) s.kernel_ns = std::strtoull(argv[4], nullptr, 10) * 1000;
  return s;
}

}  // namespace granule_probe
