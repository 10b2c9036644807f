// Host<->device copy throughput on whatever libcuda.so.1 is loaded (simdev in
// CI): pinned vs pageable host memory, per direction, for several sizes.
//
// Counters: bytes_per_second (achieved), and where SIMDEV_H2D_GBPS /
// SIMDEV_D2H_GBPS is set, modeled_GBps and achieved_over_modeled (1.0 means
// the copy ran exactly at the modeled link speed). The benchmark reads these
// variables only to report against them; it never sets them.
#include <benchmark/benchmark.h>
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

enum class Dir { H2D, D2H };
enum class HostMem { Pinned, Pageable };

CUstream g_stream = nullptr;

double modeled_gbps(Dir dir) {
  const char* v = std::getenv(dir == Dir::H2D ? "SIMDEV_H2D_GBPS" : "SIMDEV_D2H_GBPS");
  return v ? std::atof(v) : 0.0;
}

bool check(CUresult r, const char* what, benchmark::State& state) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  state.SkipWithError((std::string(what) + ": " + (name ? name : "?")).c_str());
  return false;
}

void BM_Copy(benchmark::State& state, Dir dir, HostMem mem) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  CUdeviceptr dev = 0;
  if (!check(cuMemAlloc(&dev, bytes), "cuMemAlloc", state)) return;
  void* pinned = nullptr;
  std::vector<unsigned char> pageable;
  void* host = nullptr;
  if (mem == HostMem::Pinned) {
    if (!check(cuMemHostAlloc(&pinned, bytes, 0), "cuMemHostAlloc", state)) {
      cuMemFree(dev);
      return;
    }
    host = pinned;
  } else {
    pageable.assign(bytes, 1);
    host = pageable.data();
  }
  auto copy = [&] {
    if (mem == HostMem::Pageable)
      return dir == Dir::H2D ? cuMemcpyHtoD(dev, host, bytes) : cuMemcpyDtoH(host, dev, bytes);
    CUresult r = dir == Dir::H2D ? cuMemcpyHtoDAsync(dev, host, bytes, g_stream)
                                 : cuMemcpyDtoHAsync(host, dev, bytes, g_stream);
    return r == CUDA_SUCCESS ? cuStreamSynchronize(g_stream) : r;
  };
  // One untimed copy each way first: fresh pages fault in on first touch,
  // which is not what is being measured.
  std::memset(host, 1, bytes);
  if (!check(cuMemcpyHtoD(dev, host, bytes), "warm-up", state) ||
      !check(cuMemcpyDtoH(host, dev, bytes), "warm-up", state) ||
      !check(copy(), "warm-up", state)) {
    if (pinned) cuMemFreeHost(pinned);
    cuMemFree(dev);
    return;
  }

  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const CUresult r = copy();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!check(r, "copy", state)) break;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  const double model = modeled_gbps(dir);
  if (model > 0 && seconds > 0) {
    const double achieved = static_cast<double>(state.iterations()) * bytes / seconds / 1e9;
    state.counters["modeled_GBps"] = model;
    state.counters["achieved_over_modeled"] = achieved / model;
  }
  if (pinned) cuMemFreeHost(pinned);
  cuMemFree(dev);
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t s : {int64_t{64} << 10, int64_t{1} << 20, int64_t{16} << 20, int64_t{64} << 20})
    b->Arg(s);
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(BM_Copy, h2d_pinned, Dir::H2D, HostMem::Pinned)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Copy, h2d_pageable, Dir::H2D, HostMem::Pageable)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Copy, d2h_pinned, Dir::D2H, HostMem::Pinned)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Copy, d2h_pageable, Dir::D2H, HostMem::Pageable)->Apply(sizes);

int setup_driver() {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUresult r = cuInit(0);
  if (r == CUDA_SUCCESS) r = cuDeviceGet(&dev, 0);
  if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(ctx);
  if (r == CUDA_SUCCESS) r = cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    std::fprintf(stderr, "copy_bench: driver setup failed: %s\n", name ? name : "?");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (setup_driver() != 0) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
