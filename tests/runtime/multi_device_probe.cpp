// Two devices in one process under LD_PRELOAD=libtierrt.so on simdev
// (SIMDEV_DEVICES=2), for multi_device_test.sh:
//   multi_device_probe
// Device 0 and device 1 each allocate (an engine each); device 0's block is
// spilled; device 1 enables peer access to device 0 and a kernel on device
// 1 reads the spilled block (fetched for it, mapped for device 1) and then
// writes it; device 0 reads back what device 1 wrote after another spill;
// a cross-device copy reads a spilled block. Prints one "ok: ..." line per
// check, or "FAIL: ..." and exits 1.
#include <cuda.h>
#include <dlfcn.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "simdev/simdev.h"
#include "tierrt/tierrt.h"

namespace {

constexpr size_t kBytes = 8u << 20;
constexpr size_t kWords = kBytes / 4;

int g_failures = 0;

bool ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::printf("FAIL: %s: %s\n", what, name ? name : "?");
  ++g_failures;
  return false;
}

void check(bool good, const char* what) {
  std::printf("%s: %s\n", good ? "ok" : "FAIL", what);
  if (!good) ++g_failures;
}

// count(words, n, expect, bad): *bad = words of `words` that are not `expect`.
void count_kernel(const simdev_launch* l) {
  auto* words = *static_cast<std::uint32_t* const*>(l->params[0]);
  const size_t n = *static_cast<const size_t*>(l->params[1]);
  const std::uint32_t expect = *static_cast<const std::uint32_t*>(l->params[2]);
  auto* bad = *static_cast<std::uint32_t* const*>(l->params[3]);
  std::uint32_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += words[i] != expect;
  *bad = differ;
}

// fill(words, n, value)
void fill_kernel(const simdev_launch* l) {
  auto* words = *static_cast<std::uint32_t* const*>(l->params[0]);
  const size_t n = *static_cast<const size_t*>(l->params[1]);
  const std::uint32_t value = *static_cast<const std::uint32_t*>(l->params[2]);
  for (size_t i = 0; i < n; ++i) words[i] = value;
}

// tierrt's API, from the preloaded library (absent: every check fails).
tierrt_stats stats_here() {
  tierrt_stats s{};
  s.struct_size = sizeof s;
  if (auto get = reinterpret_cast<int (*)(tierrt_stats*)>(dlsym(RTLD_DEFAULT, "tierrt_get_stats"))) (void)get(&s);
  return s;
}

int advise(CUdeviceptr p, tierrt_advice a) {
  auto fn = reinterpret_cast<int (*)(const void*, tierrt_advice)>(dlsym(RTLD_DEFAULT, "tierrt_advise"));
  return fn ? fn(reinterpret_cast<void*>(p), a) : -1;
}

// Spills `p` (its device's context current) and waits until it is off the
// device. A fetch the mover has not finalised yet refuses the advice: it
// is asked again.
bool spill(CUdeviceptr p) {
  const std::uint64_t before = stats_here().spills;
  for (int i = 0; i < 2000; ++i) {
    const tierrt_stats s = stats_here();
    if (s.spills > before && s.spilled_blocks > 0) return true;
    if (s.spills == before) (void)advise(p, TIERRT_ADVISE_SPILL);
    struct timespec ts{0, 1000000};
    nanosleep(&ts, nullptr);
  }
  return false;
}

}  // namespace

int main() {
  static const size_t count_sizes[] = {8, 8, 4, 8}, fill_sizes[] = {8, 8, 4};
  const simdev_kernel_desc count{"probe_count", &count_kernel, 4, count_sizes, nullptr, 0};
  const simdev_kernel_desc fill{"probe_fill", &fill_kernel, 3, fill_sizes, nullptr, 0};
  if (simdev_try_register_kernel(&count) != 0 || simdev_try_register_kernel(&fill) != 0) {
    std::printf("FAIL: runs on simdev only\n");
    return 1;
  }
  int n = 0;
  CUdevice d0 = 0, d1 = 0;
  CUcontext c0 = nullptr, c1 = nullptr;
  if (!ok(cuInit(0), "cuInit") || !ok(cuDeviceGetCount(&n), "cuDeviceGetCount")) return 1;
  if (n < 2) {
    std::printf("FAIL: two devices needed (SIMDEV_DEVICES=2), found %d\n", n);
    return 1;
  }
  if (!ok(cuDeviceGet(&d0, 0), "cuDeviceGet 0") || !ok(cuDeviceGet(&d1, 1), "cuDeviceGet 1") ||
      !ok(cuDevicePrimaryCtxRetain(&c0, d0), "retain 0") || !ok(cuDevicePrimaryCtxRetain(&c1, d1), "retain 1"))
    return 1;

  // Device 0: the block a peer will read, and its own kernels.
  CUmodule m0 = nullptr, m1 = nullptr;
  CUfunction count0 = nullptr, count1 = nullptr, fill1 = nullptr;
  CUdeviceptr a = 0, a_other = 0, bad0 = 0;
  if (!ok(cuCtxSetCurrent(c0), "set 0") || !ok(cuModuleLoadData(&m0, "simdev"), "module 0") ||
      !ok(cuModuleGetFunction(&count0, m0, "probe_count"), "count 0") || !ok(cuMemAlloc(&a, kBytes), "alloc a") ||
      !ok(cuMemAlloc(&a_other, kBytes), "alloc a_other") || !ok(cuMemAlloc(&bad0, 4096), "alloc bad0") ||
      !ok(cuMemsetD32(a, 0x11111111u, kWords), "memset a") || !ok(cuCtxSynchronize(), "sync 0"))
    return 1;
  const tierrt_stats s0 = stats_here();

  // Device 1: an engine of its own.
  CUstream s1 = nullptr;
  CUdeviceptr b = 0, bad1 = 0;
  if (!ok(cuCtxSetCurrent(c1), "set 1") || !ok(cuModuleLoadData(&m1, "simdev"), "module 1") ||
      !ok(cuModuleGetFunction(&count1, m1, "probe_count"), "count 1") ||
      !ok(cuModuleGetFunction(&fill1, m1, "probe_fill"), "fill 1") ||
      !ok(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), "stream 1") || !ok(cuMemAlloc(&b, kBytes), "alloc b") ||
      !ok(cuMemAlloc(&bad1, 4096), "alloc bad1") || !ok(cuMemsetD32(b, 0x22222222u, kWords), "memset b"))
    return 1;
  const tierrt_stats s1_stats = stats_here();
  check(s0.live_blocks >= 2 && s1_stats.live_blocks >= 1 && s1_stats.allocations < s0.allocations + 2,
        "each device's allocations are tracked by an engine of its own");

  // Device 0's block spilled, then device 1 reads it through peer access.
  if (!ok(cuCtxSetCurrent(c0), "set 0") || !ok(cuCtxSynchronize(), "sync 0")) return 1;
  check(spill(a), "device 0's block is spilled");
  if (!ok(cuCtxSetCurrent(c1), "set 1")) return 1;
  if (!ok(cuCtxEnablePeerAccess(c0, 0), "enable peer access 1 -> 0")) return 1;
  {
    size_t words = kWords;
    std::uint32_t expect = 0x11111111u;
    void* params[] = {&a, &words, &expect, &bad1};
    if (!ok(cuLaunchKernel(count1, 1, 1, 1, 1, 1, 1, 0, s1, params, nullptr), "launch count on device 1") ||
        !ok(cuStreamSynchronize(s1), "sync stream 1"))
      return 1;
    std::uint32_t bad = 1;
    if (!ok(cuMemcpyDtoH(&bad, bad1, 4), "read bad1")) return 1;
    check(bad == 0, "a kernel on device 1 reads device 0's spilled block, every word as written");
  }
  // Device 1 writes it; device 0 spills it again and reads it back.
  {
    size_t words = kWords;
    std::uint32_t value = 0x33333333u;
    void* params[] = {&a, &words, &value};
    if (!ok(cuLaunchKernel(fill1, 1, 1, 1, 1, 1, 1, 0, s1, params, nullptr), "launch fill on device 1") ||
        !ok(cuStreamSynchronize(s1), "sync stream 1"))
      return 1;
  }
  if (!ok(cuCtxSetCurrent(c0), "set 0")) return 1;
  check(spill(a), "device 0 spills the block device 1 wrote");
  {
    size_t words = kWords;
    std::uint32_t expect = 0x33333333u;
    void* params[] = {&a, &words, &expect, &bad0};
    std::uint32_t bad = 1;
    if (!ok(cuLaunchKernel(count0, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "launch count on device 0") ||
        !ok(cuMemcpyDtoH(&bad, bad0, 4), "read bad0"))
      return 1;
    check(bad == 0, "device 0 reads back what device 1 wrote, after a spill and a fetch");
  }
  // A copy from device 0's spilled block to device 1's block (no peer access needed).
  check(spill(a), "spilled once more");
  if (!ok(cuCtxSetCurrent(c1), "set 1") || !ok(cuMemcpyPeerAsync(b, c1, a, c0, kBytes, s1), "cuMemcpyPeerAsync") ||
      !ok(cuStreamSynchronize(s1), "sync stream 1"))
    return 1;
  {
    std::vector<std::uint32_t> host(kWords);
    if (!ok(cuMemcpyDtoH(host.data(), b, kBytes), "read b")) return 1;
    size_t differ = 0;
    for (std::uint32_t w : host) differ += w != 0x33333333u;
    check(differ == 0, "a copy on device 1 from device 0's spilled block copies every byte");
  }
  // A block device 0 allocates after peer access was enabled is mapped for device 1 too.
  if (!ok(cuCtxSetCurrent(c0), "set 0") || !ok(cuMemsetD32(a_other, 0x44444444u, kWords), "memset a_other") ||
      !ok(cuCtxSynchronize(), "sync 0"))
    return 1;
  CUdeviceptr late = 0;
  if (!ok(cuMemAlloc(&late, kBytes), "alloc late") || !ok(cuMemsetD32(late, 0x55555555u, kWords), "memset late") ||
      !ok(cuCtxSynchronize(), "sync 0") || !ok(cuCtxSetCurrent(c1), "set 1"))
    return 1;
  {
    size_t words = kWords;
    std::uint32_t expect = 0x55555555u;
    void* params[] = {&late, &words, &expect, &bad1};
    std::uint32_t bad = 1;
    if (!ok(cuLaunchKernel(count1, 1, 1, 1, 1, 1, 1, 0, s1, params, nullptr), "launch count of late on device 1") ||
        !ok(cuStreamSynchronize(s1), "sync stream 1") || !ok(cuMemcpyDtoH(&bad, bad1, 4), "read bad1"))
      return 1;
    check(bad == 0, "a block allocated after peer access was enabled is readable from device 1");
  }
  if (!ok(cuMemFree(b), "free b") || !ok(cuCtxSetCurrent(c0), "set 0") || !ok(cuMemFree(a), "free a") ||
      !ok(cuMemFree(late), "free late") || !ok(cuMemFree(a_other), "free a_other"))
    return 1;
  return g_failures == 0 ? 0 : 1;
}
