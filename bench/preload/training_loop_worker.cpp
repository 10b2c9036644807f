// training_loop_bench's worker: the child process that runs one variant's
// steps (see training_loop_bench.cpp) and prints one "result" line with its
// median step time, its peak device memory and, under tierrt, tierrt's
// counters. Any word read back wrong ends it with an error: correctness
// before speed.
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "simdev/simdev.h"
#include "tierrt/tierrt.h"
#include "training_loop.h"

namespace training_loop {
namespace {

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) die(std::string(what) + " failed with CUresult " + std::to_string(r));
}

// ---- the worker: kernels ----------------------------------------------------

// One word in every kStride is written and checked: a word on nearly every
// 4 KiB page, at a shifting offset, so a lost, stale or misplaced page shows,
// while the host function stays well inside the kernel's modeled duration.
constexpr size_t kStride = 1021;

uint32_t pattern(uint32_t step, uint32_t layer, size_t i) {
  // Never 0, so memory that comes back zeroed is a mismatch too; depends on
  // the step, so last step's bytes are one too.
  return (step * 2654435761u ^ layer * 2246822519u ^ static_cast<uint32_t>(i) * 3266489917u) | 1u;
}

template <class T>
T param(const simdev_launch* l, unsigned i) {
  return *static_cast<const T*>(l->params[i]);
}

// forward(uint32_t* act, size_t words, uint32_t step, uint32_t layer)
void forward_kernel(const simdev_launch* l) {
  auto* act = param<uint32_t*>(l, 0);
  const auto n = param<size_t>(l, 1);
  const auto step = param<uint32_t>(l, 2), layer = param<uint32_t>(l, 3);
  for (size_t i = 0; i < n; i += kStride) act[i] = pattern(step, layer, i);
  act[n - 1] = pattern(step, layer, n - 1);
}

// backward(const uint32_t* act, size_t words, uint32_t step, uint32_t layer,
//          uint32_t* flag): flag[0] counts bad words, flag[1] activations checked.
void backward_kernel(const simdev_launch* l) {
  const auto* act = param<const uint32_t*>(l, 0);
  const auto n = param<size_t>(l, 1);
  const auto step = param<uint32_t>(l, 2), layer = param<uint32_t>(l, 3);
  auto* flag = param<uint32_t*>(l, 4);
  for (size_t i = 0; i < n; i += kStride) flag[0] += act[i] != pattern(step, layer, i);
  flag[0] += act[n - 1] != pattern(step, layer, n - 1);
  flag[1] += 1;
}

// ---- the worker: one step per variant ---------------------------------------

struct Worker {
  Shape shape;
  CUfunction fwd = nullptr, bwd = nullptr;
  CUdeviceptr flag = 0;
  size_t peak = 0;  // device bytes the activations took, where tierrt does not count them

  void forward(CUdeviceptr act, uint32_t step, uint32_t layer, CUstream s) {
    size_t n = shape.act_bytes() / 4;
    void* p[] = {&act, &n, &step, &layer};
    check(cuLaunchKernel(fwd, 1, 1, 1, 1, 1, 1, 0, s, p, nullptr), "cuLaunchKernel (forward)");
  }
  void backward(CUdeviceptr act, uint32_t step, uint32_t layer, CUstream s) {
    size_t n = shape.act_bytes() / 4;
    void* p[] = {&act, &n, &step, &layer, &flag};
    check(cuLaunchKernel(bwd, 1, 1, 1, 1, 1, 1, 0, s, p, nullptr), "cuLaunchKernel (backward)");
  }
  // The job as tierrt sees it (PyTorch without its caching allocator, or
  // with tierrt as its allocator): cuMemAlloc and cuMemFree per activation,
  // everything on the legacy stream.
  void plain_step(uint32_t step) {
    std::vector<CUdeviceptr> act(shape.layers);
    for (uint32_t l = 0; l < shape.layers; ++l) {
      check(cuMemAlloc(&act[l], shape.act_bytes()), "cuMemAlloc (activation)");
      forward(act[l], step, l, nullptr);
    }
    for (uint32_t l = shape.layers; l-- > 0;) {
      backward(act[l], step, l, nullptr);
      check(cuMemFree(act[l]), "cuMemFree (activation)");
    }
  }
};

// What a user without tierrt runs: device memory from a ring of slots
// reused in stream order (an event per slot), as PyTorch's caching allocator
// reuses it. Not cuMemFree per activation: it synchronises the whole device
// (on simdev, fresh device memory also page-faults on first touch, which a
// GPU does not), so it would measure the allocator rather than the loop.
//   hbm (offload false): one slot per layer, nothing moves.
//   manual-offload: save_on_cpu by hand, fewer slots than layers. Each
//     activation is copied to pinned host memory on a side stream after its
//     forward kernel and its slot released once that copy is done; backward
//     copies it back into a slot one layer ahead, and the kernel waits for it.
struct PooledLoop {
  Worker& w;
  bool offload;
  CUstream side = nullptr;
  std::vector<CUdeviceptr> slot;
  std::vector<CUevent> slot_free;  // the slot's last use, recorded where it ended
  std::vector<void*> host;         // pinned, one per layer (offload only)
  std::vector<CUevent> written, fetched;
  std::vector<size_t> slot_of;
  size_t next = 0;

  PooledLoop(Worker& worker, size_t slots, bool offload_) : w(worker), offload(offload_) {
    const uint32_t layers = w.shape.layers;
    slot.resize(slots);
    slot_free.resize(slots);
    for (size_t s = 0; s < slots; ++s) {
      check(cuMemAlloc(&slot[s], w.shape.act_bytes()), "cuMemAlloc (slot)");
      check(cuEventCreate(&slot_free[s], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      check(cuEventRecord(slot_free[s], nullptr), "cuEventRecord");
    }
    w.peak = slots * w.shape.act_bytes();
    slot_of.resize(layers);
    if (!offload) return;
    check(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    host.resize(layers);
    written.resize(layers);
    fetched.resize(layers);
    for (uint32_t l = 0; l < layers; ++l) {
      check(cuMemHostAlloc(&host[l], w.shape.act_bytes(), 0), "cuMemHostAlloc");
      check(cuEventCreate(&written[l], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      check(cuEventCreate(&fetched[l], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    }
  }

  // Round robin: with two or more slots, a slot's previous user has always
  // recorded its release before the slot is handed out again.
  size_t acquire(CUstream s) {
    size_t i = next++ % slot.size();
    check(cuStreamWaitEvent(s, slot_free[i], 0), "cuStreamWaitEvent (slot)");
    return i;
  }
  void release(size_t i, CUstream s) { check(cuEventRecord(slot_free[i], s), "cuEventRecord (slot)"); }

  void prefetch(uint32_t l) {
    slot_of[l] = acquire(side);
    check(cuMemcpyHtoDAsync(slot[slot_of[l]], host[l], w.shape.act_bytes(), side), "cuMemcpyHtoDAsync");
    check(cuEventRecord(fetched[l], side), "cuEventRecord");
  }

  void step(uint32_t step) {
    const uint32_t layers = w.shape.layers;
    for (uint32_t l = 0; l < layers; ++l) {
      size_t s = slot_of[l] = acquire(nullptr);
      w.forward(slot[s], step, l, nullptr);
      if (!offload) continue;
      check(cuEventRecord(written[l], nullptr), "cuEventRecord");
      check(cuStreamWaitEvent(side, written[l], 0), "cuStreamWaitEvent");
      check(cuMemcpyDtoHAsync(host[l], slot[s], w.shape.act_bytes(), side), "cuMemcpyDtoHAsync");
      release(s, side);  // the device copy is free once the offload is done
    }
    if (offload) prefetch(layers - 1);
    for (uint32_t l = layers; l-- > 0;) {
      if (offload) {
        if (l > 0) prefetch(l - 1);  // one layer ahead, on the side stream
        check(cuStreamWaitEvent(nullptr, fetched[l], 0), "cuStreamWaitEvent");
      }
      w.backward(slot[slot_of[l]], step, l, nullptr);
      release(slot_of[l], nullptr);
    }
  }
};

CUfunction find_kernel(CUmodule m, const char* name, simdev_kernel_fn fn, const std::vector<size_t>& sizes,
                       unsigned long long ns) {
  simdev_kernel_desc d{name, fn, static_cast<unsigned>(sizes.size()), sizes.data(), nullptr, ns};
  if (simdev_try_register_kernel(&d) != 0) die("the kernels need simdev");
  CUfunction f;
  check(cuModuleGetFunction(&f, m, name), "cuModuleGetFunction");
  return f;
}

}  // namespace

int run_worker(const Args& args) {
  const std::string& variant = args.worker;
  Worker w{args.shape};
  CUdevice dev;
  CUcontext ctx;
  CUmodule m;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  check(cuModuleLoadData(&m, "simdev host kernels"), "cuModuleLoadData");
  const unsigned long long ns = 1000ull * w.shape.kernel_us;
  w.fwd = find_kernel(m, "bench_forward", &forward_kernel, {8, 8, 4, 4}, ns);
  w.bwd = find_kernel(m, "bench_backward", &backward_kernel, {8, 8, 4, 4, 8}, ns);
  check(cuMemAlloc(&w.flag, 4096), "cuMemAlloc (flag)");
  check(cuMemsetD32(w.flag, 0, 2), "cuMemsetD32");

  // The budget less one activation's worth of slack for the flag buffer.
  std::unique_ptr<PooledLoop> pooled;
  if (variant == "hbm")
    pooled = std::make_unique<PooledLoop>(w, w.shape.layers, false);
  else if (variant == "manual-offload")
    pooled = std::make_unique<PooledLoop>(w, w.shape.budget() / w.shape.act_bytes() - 1, true);
  else if (variant.rfind("tierrt-", 0) != 0)
    die("unknown variant " + variant);
  auto mark_step = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "tierrt_mark_step"));
  auto get_stats = reinterpret_cast<int (*)(tierrt_stats*)>(dlsym(RTLD_DEFAULT, "tierrt_get_stats"));
  // tierrt's counters when the warm-up steps end: the fetches after it are
  // the steady state (the planner learns in the first step).
  tierrt_stats warm{};
  warm.struct_size = sizeof warm;

  std::vector<double> ms;
  for (uint32_t step = 0; step < w.shape.steps; ++step) {
    if (step == kWarmupSteps && get_stats) (void)get_stats(&warm);
    auto t0 = std::chrono::steady_clock::now();
    if (pooled) pooled->step(step);
    else w.plain_step(step);
    if (mark_step) mark_step();
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    uint32_t flag[2];
    check(cuMemcpyDtoH(flag, w.flag, sizeof flag), "cuMemcpyDtoH (flag)");
    if (flag[0] != 0 || flag[1] != (step + 1) * w.shape.layers)
      die(variant + ": DATA MISMATCH in step " + std::to_string(step) + ": " + std::to_string(flag[0]) +
          " bad words, " + std::to_string(flag[1]) + " of " + std::to_string((step + 1) * w.shape.layers) +
          " activations checked");
  }
  std::sort(ms.begin() + kWarmupSteps, ms.end());
  const size_t rest = ms.size() - kWarmupSteps;
  const double median = rest % 2 ? ms[kWarmupSteps + rest / 2]
                                 : (ms[kWarmupSteps + rest / 2 - 1] + ms[kWarmupSteps + rest / 2]) / 2;

  // One line for the driver process to read; tierrt's figures when present
  // (its peak is the device memory its blocks held).
  tierrt_stats st{};
  st.struct_size = sizeof st;
  const bool tiered = get_stats && get_stats(&st) == 0;
  if (!tiered && variant.rfind("tierrt-", 0) == 0)
    die(variant + ": tierrt is not running in the worker (was libtierrt.so preloaded?)");
  std::printf("result median_ms=%.4f checked=%u peak=%llu", median, w.shape.steps * w.shape.layers,
              static_cast<unsigned long long>(tiered ? st.device_peak_bytes : w.peak));
  using ull = unsigned long long;
  if (tiered)
    std::printf(" tiered=1 untiered=%llu spills=%llu fetches=%llu demand=%llu late=%llu"
                " planned_spills=%llu planned_prefetches=%llu by_launchers=%llu handed_over=%llu d2h=%llu h2d=%llu",
                ull{st.peak_bytes_untiered}, ull{st.spills}, ull{st.fetches}, ull{st.demand_fetches},
                ull{st.late_fetches}, ull{st.planned_spills}, ull{st.planned_prefetches},
                ull{st.prefetches_by_launchers}, ull{st.chunks_handed_over}, ull{st.d2h_bytes_per_s},
                ull{st.h2d_bytes_per_s});
  if (tiered)  // after the warm-up steps
    std::printf(" steady_fetches=%llu steady_demand=%llu steady_demand_waited=%llu steady_prefetches=%llu steady_late=%llu"
                " steady_created=%llu",
                ull{st.fetches - warm.fetches}, ull{st.demand_fetches - warm.demand_fetches},
                ull{st.demand_fetches_waited - warm.demand_fetches_waited},
                ull{st.planned_prefetches - warm.planned_prefetches}, ull{st.late_fetches - warm.late_fetches},
                ull{st.fetch_chunks_created - warm.fetch_chunks_created});
  std::printf("\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace training_loop
