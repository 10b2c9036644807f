// Shared helpers for the allocator tests that run on simdev: a context, host
// kernels (fill / checksum), and the launch protocol the runtime follows
// (ensure_resident, enqueue, record_use, release).
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>
#include <simdev/simdev.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "allocator/allocator.h"

namespace tierrt::alloc::testing {

#define CU_OK(x)                                \
  do {                                          \
    ASSERT_EQ((x), CUDA_SUCCESS) << #x;         \
  } while (0)

constexpr std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// The byte pattern fill() writes: byte i of (seed) is a function of both.
inline void pattern(std::uint8_t* dst, std::size_t n, std::uint64_t seed) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t v = mix(seed + i);
    std::memcpy(dst + i, &v, 8);
  }
  for (; i < n; ++i) dst[i] = static_cast<std::uint8_t>(mix(seed + i));
}

inline std::uint64_t checksum(const std::uint8_t* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t v;
    std::memcpy(&v, p + i, 8);
    h = mix(h ^ v);
  }
  for (; i < n; ++i) h = mix(h ^ p[i]);
  return h;
}

struct Kernels {
  CUfunction fill = nullptr;       // (ptr, n, seed)
  CUfunction fill_slow = nullptr;  // the same, and the stream is busy 50 ms
  CUfunction sum = nullptr;        // (ptr, n, out_ptr): *out = checksum
  // The same two, touching memory only at the end of their 50 ms, and not
  // before the late gate is open: work that is still using a block while
  // the host goes on.
  CUfunction fill_late = nullptr;
  CUfunction sum_late = nullptr;
};

inline constexpr std::uint64_t kLateNs = 50'000'000;

// Open unless a test closes it; a late kernel waits for it (10 s at most,
// so that a test that forgets to open it fails rather than hangs).
inline std::atomic<bool>& late_gate() {
  static std::atomic<bool> open{true};
  return open;
}
inline void wait_for_late_gate() {
  for (int ms = 0; ms < 10'000 && !late_gate().load(); ++ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

inline void k_fill(const simdev_launch* l) {
  CUdeviceptr p;
  std::uint64_t n, seed;
  std::memcpy(&p, l->params[0], 8);
  std::memcpy(&n, l->params[1], 8);
  std::memcpy(&seed, l->params[2], 8);
  pattern(reinterpret_cast<std::uint8_t*>(p), n, seed);
}
inline void k_sum(const simdev_launch* l) {
  CUdeviceptr p, out;
  std::uint64_t n;
  std::memcpy(&p, l->params[0], 8);
  std::memcpy(&n, l->params[1], 8);
  std::memcpy(&out, l->params[2], 8);
  const std::uint64_t h = checksum(reinterpret_cast<const std::uint8_t*>(p), n);
  std::memcpy(reinterpret_cast<void*>(out), &h, 8);
}
inline void k_fill_late(const simdev_launch* l) {
  std::this_thread::sleep_for(std::chrono::nanoseconds(kLateNs));
  wait_for_late_gate();
  k_fill(l);
}
inline void k_sum_late(const simdev_launch* l) {
  std::this_thread::sleep_for(std::chrono::nanoseconds(kLateNs));
  wait_for_late_gate();
  k_sum(l);
}

// A context current on this thread, and the kernels. Call once per process
// (then Env::bind() on every other thread).
struct Env {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  Kernels k;

  static Env& get() {
    static Env e = [] {
      Env x;
      static const std::size_t sizes[3] = {8, 8, 8};
      simdev_kernel_desc d{};
      d.num_params = 3;
      d.param_sizes = sizes;
      d.name = "tierrt_fill";
      d.fn = k_fill;
      simdev_register_kernel(&d);
      d.name = "tierrt_fill_slow";
      d.modeled_ns = 50'000'000;
      simdev_register_kernel(&d);
      d.name = "tierrt_sum";
      d.fn = k_sum;
      d.modeled_ns = 0;
      simdev_register_kernel(&d);
      d.modeled_ns = kLateNs;
      d.name = "tierrt_fill_late";
      d.fn = k_fill_late;
      simdev_register_kernel(&d);
      d.name = "tierrt_sum_late";
      d.fn = k_sum_late;
      simdev_register_kernel(&d);
      if (cuInit(0) != CUDA_SUCCESS) return x;
      cuDeviceGet(&x.dev, 0);
      cuDevicePrimaryCtxRetain(&x.ctx, x.dev);
      cuCtxSetCurrent(x.ctx);
      static const char image[] = "simdev host kernels";
      CUmodule m = nullptr;
      cuModuleLoadData(&m, image);
      cuModuleGetFunction(&x.k.fill, m, "tierrt_fill");
      cuModuleGetFunction(&x.k.fill_slow, m, "tierrt_fill_slow");
      cuModuleGetFunction(&x.k.sum, m, "tierrt_sum");
      cuModuleGetFunction(&x.k.fill_late, m, "tierrt_fill_late");
      cuModuleGetFunction(&x.k.sum_late, m, "tierrt_sum_late");
      return x;
    }();
    return e;
  }
  void bind() const { cuCtxSetCurrent(ctx); }
};

inline CUresult launch3(CUfunction f, CUstream s, std::uint64_t a, std::uint64_t b,
                        std::uint64_t c) {
  void* params[3] = {&a, &b, &c};
  return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
}

// Whether use_blocks records its uses lazily (use_tracker.h), as the
// runtime does for a named or the legacy stream when nothing named is about
// to move. Set by a suite's fixture before the test's threads start.
inline std::atomic<bool>& lazy_uses() {
  static std::atomic<bool> lazy{false};
  return lazy;
}

// Lazily, no launch records its stream's open event: only a wait settles it
// (the path a short window would mostly hide).
inline void apply_lazy_uses(Options* o) {
  if (lazy_uses()) o->lazy_use_window_ns = UINT64_MAX;
}

// A suite's parameter: the spill mode, and whether uses are recorded lazily.
struct ModeParam {
  SpillMode mode = SpillMode::Remap;
  bool lazy = false;
  operator SpillMode() const { return mode; }  // NOLINT: make(GetParam()) as before
};
inline std::string mode_param_name(const ::testing::TestParamInfo<ModeParam>& i) {
  return std::string(i.param.mode == SpillMode::Remap ? "remap" : "copy") + (i.param.lazy ? "_lazy" : "");
}
inline auto every_mode_param() {
  return ::testing::Values(ModeParam{SpillMode::Remap, false}, ModeParam{SpillMode::Copy, false},
                           ModeParam{SpillMode::Remap, true}, ModeParam{SpillMode::Copy, true});
}
// The fixture of a suite run with every ModeParam.
class ModeSuite : public ::testing::TestWithParam<ModeParam> {
 protected:
  void SetUp() override { lazy_uses() = GetParam().lazy; }
  void TearDown() override { lazy_uses() = false; }
};

// What the runtime does around a launch that names `blocks`.
template <class F>
CUresult use_blocks(Allocator& a, std::span<Block* const> blocks, CUstream s, F&& enqueue) {
  CUresult r = a.ensure_resident(blocks, s);
  if (r != CUDA_SUCCESS) return r;
  r = enqueue();
  if (r == CUDA_SUCCESS) r = a.record_use(blocks, s, /*capturing=*/false, lazy_uses().load());
  a.release(blocks);
  return r;
}

// Fills the block with pattern(seed) on stream s (asynchronously).
inline CUresult fill(Allocator& a, Block* b, CUstream s, std::uint64_t seed, bool slow = false) {
  Block* bs[1] = {b};
  const Kernels& k = Env::get().k;
  return use_blocks(a, bs, s, [&] {
    return launch3(slow ? k.fill_slow : k.fill, s, b->va, b->size, seed);
  });
}

// Reads the block back (synchronously) through a demand fetch if needed.
inline CUresult read(Allocator& a, Block* b, std::vector<std::uint8_t>* out, CUstream s = nullptr) {
  out->resize(b->size);
  Block* bs[1] = {b};
  CUresult r = use_blocks(a, bs, s, [&] {
    return cuMemcpyDtoHAsync(out->data(), b->va, b->size, s);
  });
  if (r == CUDA_SUCCESS) r = cuStreamSynchronize(s);
  return r;
}

inline std::vector<std::uint8_t> expected(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> v(n);
  pattern(v.data(), n, seed);
  return v;
}

}  // namespace tierrt::alloc::testing
