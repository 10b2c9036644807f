// What tierrt's launch hook adds to a kernel launch, on simdev: a launch
// with 8 pointer parameters, each naming a different resident block, at
// 1e2 .. 1e4 live blocks, through the hook's path against a direct call to
// the driver. The "added_ns" counter is the difference of the two medians'
// worth of work per launch, measured in the same process.
//
// Also: allocate + free through tierrt against the driver's own
// cuMemAlloc / cuMemFree (what a job does without tierrt).
#include <benchmark/benchmark.h>
#include <cuda.h>

#include <cstdlib>
#include <vector>

#include "driver/driver.h"
#include "runtime/engine.h"
#include "simdev/simdev.h"

namespace {

using tierrt::Engine;

void noop_kernel(const simdev_launch*) {}

struct Setup {
  CUfunction f = nullptr;
  Engine* engine = nullptr;
};

const Setup& setup() {
  static Setup s = [] {
    Setup r;
    const size_t sizes[8] = {8, 8, 8, 8, 8, 8, 8, 8};
    simdev_kernel_desc d{"bench_noop8", &noop_kernel, 8, sizes, nullptr, 0};
    CUdevice dev;
    CUcontext ctx;
    CUmodule m;
    if (simdev_try_register_kernel(&d) != 0 || cuInit(0) || cuDeviceGet(&dev, 0) ||
        cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) || cuModuleLoadData(&m, "simdev") ||
        cuModuleGetFunction(&r.f, m, "bench_noop8"))
      std::abort();
    r.engine = Engine::start();
    if (!r.engine) std::abort();
    return r;
  }();
  return s;
}

// n live blocks; the launch names 8 of them, spread over the set.
std::vector<CUdeviceptr>& blocks(size_t n) {
  static std::vector<CUdeviceptr> live;
  Engine* e = setup().engine;
  while (live.size() < n) {
    CUdeviceptr p;
    if (e->allocate(&p, 2u << 20, nullptr) != CUDA_SUCCESS) std::abort();
    live.push_back(p);
  }
  return live;
}

void launch_args(size_t n, CUdeviceptr (&ptrs)[8], void* (&params)[8]) {
  auto& live = blocks(n);
  for (int i = 0; i < 8; ++i) {
    ptrs[i] = live[(i * live.size()) / 8] + 256;  // interior pointers, as tensor views are
    params[i] = &ptrs[i];
  }
}

// Launches `st` times with 8 block pointers; `hooked` goes through tierrt's
// launch path, `launch_too` false leaves out the driver's own launch (what
// is then left is the work tierrt adds: lookups, residency, use recording).
void run_launches(benchmark::State& st, bool hooked, bool launch_too) {
  const Setup& s = setup();
  CUdeviceptr ptrs[8];
  void* params[8];
  launch_args(static_cast<size_t>(st.range(0)), ptrs, params);
  auto call = [&] {
    return launch_too ? TIERRT_CU(cuLaunchKernel, s.f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) : CUDA_SUCCESS;
  };
  for (auto _ : st) {
    CUresult r = hooked ? s.engine->launch(s.f, nullptr, params, nullptr, call) : call();
    if (r) std::abort();
  }
  cuCtxSynchronize();
}

void BM_LaunchDirect(benchmark::State& st) { run_launches(st, false, true); }
void BM_LaunchThroughHook(benchmark::State& st) { run_launches(st, true, true); }
void BM_HookWorkOnly(benchmark::State& st) { run_launches(st, true, false); }


void BM_AllocFreeDriver(benchmark::State& st) {
  setup();
  const size_t bytes = static_cast<size_t>(st.range(0));
  for (auto _ : st) {
    CUdeviceptr p;
    if (TIERRT_CU(cuMemAlloc, &p, bytes) || TIERRT_CU(cuMemFree, p)) std::abort();
  }
}

void BM_AllocFreeTierrt(benchmark::State& st) {
  Engine* e = setup().engine;
  const size_t bytes = static_cast<size_t>(st.range(0));
  for (auto _ : st) {
    CUdeviceptr p;
    if (e->allocate(&p, bytes, nullptr) || e->free_async(p, nullptr, [] { return CUDA_ERROR_NOT_FOUND; }))
      std::abort();
  }
}

BENCHMARK(BM_LaunchDirect)->Arg(100)->Arg(1000)->Arg(10000);
BENCHMARK(BM_LaunchThroughHook)->Arg(100)->Arg(1000)->Arg(10000);
BENCHMARK(BM_HookWorkOnly)->Arg(100)->Arg(1000)->Arg(10000);
BENCHMARK(BM_AllocFreeDriver)->Arg(4 << 20)->Arg(64 << 20);
BENCHMARK(BM_AllocFreeTierrt)->Arg(4 << 20)->Arg(64 << 20);

}  // namespace

BENCHMARK_MAIN();
