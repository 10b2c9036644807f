// What tierrt's launch hook adds to a kernel launch, on simdev: a launch
// with 8 pointer parameters, each naming a different resident block, at
// 1e2 .. 1e5 live blocks, through the hook's path against a direct call to
// the driver. The "added_ns" counter is the median hooked launch less the
// median direct one, each launch timed by itself, in the same process;
// BM_HarnessNull times the direct launch in both halves, so that each run
// says how far its own harness is from even.
//
// Also: allocate + free through tierrt against the driver's own
// cuMemAlloc / cuMemFree (what a job does without tierrt); and what a demand
// fetch costs the thread that launches on a spilled block: the launch call
// returns once the fetch is enqueued and the stream waits for it, so its
// time ("host_us") is set against the time until the kernel ran
// ("until_done_us", mostly the copy over the modeled link).
#include <benchmark/benchmark.h>
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include "driver/driver.h"
#include "runtime/engine.h"
#include "runtime/policy_thread.h"
#include "simdev/simdev.h"

namespace {

using tierrt::Engine;

void noop_kernel(const simdev_launch*) {}

// The rest of a kernel's parameters, beside its 8 pointers: PyTorch's
// elementwise kernels take their tensors' sizes and strides by value (an
// offset calculator: hundreds of bytes), and most words a launch scans are
// such numbers, not pointers.
constexpr size_t kScalarBytes = 256;

struct Setup {
  CUfunction f = nullptr;
  CUfunction mixed = nullptr;  // 8 pointers, then kScalarBytes of numbers
  CUfunction busy = nullptr;  // no parameters, 2 ms modeled: longer than a round of launches
  Engine* engine = nullptr;
  CUcontext ctx = nullptr;
};

const Setup& setup() {
  static Setup s = [] {
    Setup r;
    const size_t sizes[9] = {8, 8, 8, 8, 8, 8, 8, 8, kScalarBytes};
    simdev_kernel_desc d{"bench_noop8", &noop_kernel, 8, sizes, nullptr, 0};
    simdev_kernel_desc mixed{"bench_mixed", &noop_kernel, 9, sizes, nullptr, 0};
    simdev_kernel_desc busy{"bench_busy", &noop_kernel, 0, nullptr, nullptr, 2'000'000};
    CUdevice dev;
    CUcontext ctx;
    CUmodule m;
    if (simdev_try_register_kernel(&d) != 0 || simdev_try_register_kernel(&mixed) != 0 ||
        simdev_try_register_kernel(&busy) != 0 || cuInit(0) ||
        cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuModuleLoadData(&m, "simdev") || cuModuleGetFunction(&r.f, m, "bench_noop8") ||
        cuModuleGetFunction(&r.mixed, m, "bench_mixed") ||
        cuModuleGetFunction(&r.busy, m, "bench_busy"))
      std::abort();
    r.engine = Engine::start();
    if (!r.engine) std::abort();
    r.ctx = ctx;
    return r;
  }();
  return s;
}

constexpr size_t kBlockBytes = 2u << 20;

// Time on a CPU of the threads named `name` (tierrt and simdev name theirs),
// from the scheduler's own count (ns); 0 where /proc does not tell.
std::uint64_t threads_cpu_ns(const char* name) {
  std::uint64_t ns = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream comm(task.path() / "comm");
    std::string n;
    if (!std::getline(comm, n) || n != name) continue;
    std::ifstream sched(task.path() / "schedstat");
    std::uint64_t on_cpu = 0;
    if (sched >> on_cpu) ns += on_cpu;
  }
  return ns;
}

// Times the calling thread was made to give up its CPU (another thread's
// turn), where it did not wait of its own accord.
long preemptions() {
  rusage ru{};
  return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nivcsw : 0;
}

// The q-quantile (0..1) of v.
double quantile(std::vector<double> v, double q) {
  const auto at = static_cast<std::ptrdiff_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + at, v.end());
  return v[static_cast<std::size_t>(at)];
}

double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

// The mean of the middle half (25th to 75th percentile): as blind to the
// tails as the median, but not held to the clock's steps. Where the host's
// clock moves in coarse steps (kvm-clock, and the TSC a hypervisor shows,
// both move in 10 ns steps on some VMs), a median of single launches is a
// whole number of steps; the middle half's mean averages over where each
// launch fell between two steps.
double interquartile_mean(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t lo = v.size() / 4, hi = v.size() - v.size() / 4;
  double sum = 0;
  for (std::size_t i = lo; i < hi; ++i) sum += v[i];
  return sum / static_cast<double>(hi - lo);
}

// Whether n live blocks fit on the device (simdev's holds 4 GiB unless
// SIMDEV_MEM says more; the blocks are never touched, so a larger one costs
// no host memory): past that they would be spilled, which is not what is
// measured here.
bool fits(benchmark::State& st, size_t n) {
  setup();
  size_t free_bytes = 0, total = 0;
  if (cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS || n * kBlockBytes <= total * 7 / 8) return true;
  st.SkipWithError("the live blocks do not fit on this device (on simdev: SIMDEV_MEM=32GiB for 1e4, 256GiB for 1e5)");
  return false;
}

// n live blocks; the launch names 8 of them, spread over the set.
std::vector<CUdeviceptr>& blocks(size_t n) {
  static std::vector<CUdeviceptr> live;
  Engine* e = setup().engine;
  while (live.size() < n) {
    CUdeviceptr p;
    if (e->allocate(&p, kBlockBytes, nullptr) != CUDA_SUCCESS) std::abort();
    live.push_back(p);
  }
  return live;
}

// params: room for 8 at least.
void launch_args(size_t n, CUdeviceptr (&ptrs)[8], void** params) {
  auto& live = blocks(n);
  for (int i = 0; i < 8; ++i) {
    ptrs[i] = live[(i * live.size()) / 8] + 256;  // interior pointers, as tensor views are
    params[i] = &ptrs[i];
  }
}

// One launch through tierrt's launch path, out of line: an instruction
// counter finds it by its name (bench/preload/hook_instructions.sh).
template <class Call>
[[gnu::noinline]] CUresult hooked_launch(Engine* e, CUfunction f, void** params, Call& call) {
  return e->launch(f, nullptr, params, nullptr, call);
}

// Launches `st` times with 8 block pointers; `hooked` goes through tierrt's
// launch path, `launch_too` false leaves out the driver's own launch (what
// is then left is the work tierrt adds: lookups, residency, use recording).
// `with_scalars`: the kernel takes kScalarBytes of numbers after them.
void run_launches(benchmark::State& st, bool hooked, bool launch_too, bool with_scalars = false) {
  const Setup& s = setup();
  CUdeviceptr ptrs[8];
  void* params[9];
  if (!fits(st, static_cast<size_t>(st.range(0)))) return;
  launch_args(static_cast<size_t>(st.range(0)), ptrs, params);
  // Sizes, strides and a float's bits, as an offset calculator holds them.
  std::uint64_t scalars[kScalarBytes / 8];
  for (size_t i = 0; i < kScalarBytes / 8; ++i) scalars[i] = i % 3 == 2 ? 0x3f800000u : (i + 1) * 1024;
  params[8] = scalars;
  const CUfunction f = with_scalars ? s.mixed : s.f;
  auto call = [&] {
    return launch_too ? TIERRT_CU(cuLaunchKernel, f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) : CUDA_SUCCESS;
  };
  for (auto _ : st) {
    CUresult r = hooked ? hooked_launch(s.engine, f, params, call) : call();
    if (r) std::abort();
  }
  cuCtxSynchronize();
}

void BM_LaunchDirect(benchmark::State& st) { run_launches(st, false, true); }
void BM_LaunchThroughHook(benchmark::State& st) { run_launches(st, true, true); }
void BM_HookWorkOnly(benchmark::State& st) { run_launches(st, true, false); }
// BM_HookWorkOnly with kScalarBytes of numbers after the 8 pointers: what
// the words that name nothing cost the scan.
void BM_HookWorkOnlyWithScalars(benchmark::State& st) { run_launches(st, true, false, /*with_scalars=*/true); }
bool as_weights(const struct Setup& s, void** params);
double clock_period(const struct Setup& s);
std::uint64_t policy_turns(const struct Setup& s);
std::uint64_t policy_wake_calls(const struct Setup& s);
// The hook's own work on blocks the policy found persistent (lazy use
// events): what the launch path costs a training job's weights.
void BM_HookWorkOnlyOnWeights(benchmark::State& st) {
  CUdeviceptr ptrs[8];
  void* params[8];
  if (!fits(st, static_cast<size_t>(st.range(0)))) return;
  launch_args(static_cast<size_t>(st.range(0)), ptrs, params);
  if (!as_weights(setup(), params)) {
    st.SkipWithError("the policy did not find the blocks persistent (the reactive policy classifies nothing)");
    return;
  }
  const std::uint64_t events_before = setup().engine->allocator_stats().use_events;
  run_launches(st, true, false);
  st.counters["clock_period"] = clock_period(setup());
  st.counters["events_per_launch"] =
      static_cast<double>(setup().engine->allocator_stats().use_events - events_before) /
      static_cast<double>(std::max<benchmark::IterationCount>(st.iterations(), 1));
}

// The 8-pointer launch over st.range(0) live blocks; with st.range(1) != 0
// on blocks the policy found persistent. False (the run skipped, saying
// why) where that cannot be.
bool weights_launch(benchmark::State& st, const Setup& s, CUdeviceptr (&ptrs)[8], void* (&params)[8]) {
  if (!fits(st, static_cast<size_t>(st.range(0)))) return false;
  launch_args(static_cast<size_t>(st.range(0)), ptrs, params);
  if (st.range(1) != 0 && !as_weights(s, params)) {
    st.SkipWithError("the policy did not find the blocks persistent (the reactive policy classifies nothing)");
    return false;
  }
  return true;
}

// The hook's own work (no driver launch) in bursts of 256 launches, 200 us
// apart: as a job launches, with the policy thread keeping up between
// bursts (a tight loop outruns it, its ring fills and posts are dropped,
// which is not what a job's launches meet). "ns_per_launch": the median
// burst's time per launch, each burst timed as a whole (no clock read in
// it); "median_ns": the median launch (see below).
void BM_HookWorkInBursts(benchmark::State& st) {
  const Setup& s = setup();
  CUdeviceptr ptrs[8];
  void* params[8];
  if (!weights_launch(st, s, ptrs, params)) return;
  auto none = [] { return CUDA_SUCCESS; };
  constexpr int kBurst = 256;
  std::vector<double> bursts;
  bursts.reserve(static_cast<std::size_t>(st.max_iterations));
  using Clock = std::chrono::steady_clock;
  const std::uint64_t events_before = s.engine->allocator_stats().use_events;
  // Each launch of every 8th burst also timed by itself (one clock read per
  // launch, as much in the empty loop it is set against): the typical
  // launch, without the rare expensive ones a burst's time includes.
  std::vector<double> each, empty;
  for (auto _ : st) {
    st.PauseTiming();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    st.ResumeTiming();
    const bool timed = bursts.size() % 8 == 7;
    auto t0 = Clock::now();
    const auto start = t0;
    for (int i = 0; i < kBurst; ++i) {
      if (s.engine->launch(s.f, nullptr, params, nullptr, none)) std::abort();
      if (timed) {
        const auto t1 = Clock::now();
        each.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
        t0 = t1;
      }
    }
    bursts.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kBurst);
    if (timed) {
      t0 = Clock::now();
      for (int i = 0; i < kBurst; ++i) {
        benchmark::DoNotOptimize(params);
        const auto t1 = Clock::now();
        empty.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
        t0 = t1;
      }
    }
  }
  if (bursts.empty()) return;
  st.counters["ns_per_launch"] = median(bursts);
  if (!each.empty()) st.counters["median_ns"] = median(each) - median(empty);
  st.counters["events_per_launch"] = static_cast<double>(s.engine->allocator_stats().use_events - events_before) /
                                     static_cast<double>(bursts.size() * kBurst);
}

// The policy thread's turns so far (a drain of its ring, then a sleep); 0
// without a planner.
std::uint64_t policy_turns(const Setup& s) {
  const tierrt::PolicyThread* p = s.engine->planner_for_tests();
  return p != nullptr ? p->turns() : 0;
}

// Futex calls made to wake the policy thread so far (a post to it napping,
// one per idle spell); 0 without a planner.
std::uint64_t policy_wake_calls(const Setup& s) {
  const tierrt::PolicyThread* p = s.engine->planner_for_tests();
  return p != nullptr ? p->wake_calls() : 0;
}

// The device clock's sampling period (launches per timing event): it grows
// with each step the planner's plan did not miss (device_clock.h); 0
// without a planner.
double clock_period(const Setup& s) {
  const tierrt::PolicyThread* p = s.engine->planner_for_tests();
  return p != nullptr ? static_cast<double>(p->clock_period()) : 0;
}

// Steps of launches naming the 8 blocks, marked, until the policy found
// them persistent (or, named by every launch, workspace) and the planner's
// device clock samples at its sparsest: what a training job's weights are
// after its first steps. Done once their launches share their stream's use
// event; false when that did not happen within 10 s (the reactive policy
// classifies nothing).
bool as_weights(const Setup& s, void** params) {
  auto call = [&] { return TIERRT_CU(cuLaunchKernel, s.f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr); };
  auto launches = [&](int n) {
    for (int i = 0; i < n; ++i)
      if (s.engine->launch(s.f, nullptr, params, nullptr, call)) std::abort();
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const std::uint64_t before = s.engine->allocator_stats().use_events;
    launches(64);
    const bool sparsest = clock_period(s) == 0 || clock_period(s) == (tierrt::DeviceClock::kEvery << tierrt::DeviceClock::kMaxShift);
    if (s.engine->allocator_stats().use_events - before < 16 && sparsest) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    launches(16);
    s.engine->note_step();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// The same 8-pointer launch, direct and through the hook, interleaved in
// rounds of 256 so that both see the same machine; each round queues behind
// a busy kernel, so that simdev's own enqueue costs the same in both halves
// (into an idle stream its worker races the launching thread). Each launch
// is timed by itself (one clock read between consecutive launches: its cost
// is in both halves alike):
//  - "added_ns", "direct_ns", "hooked_ns": medians per launch, the typical
//    launch's cost;
//  - "added_mean_ns", "hooked_over_direct": means, what a job pays over many
//    launches: with the rare expensive ones (a use event's or the device
//    clock's record, the launching thread losing its core);
//  - "preempted_direct", "preempted_hooked": times per round the launching
//    thread was made to give up its core (on a small machine tierrt's policy
//    thread and simdev's stream worker share it);
//  - "policy_cpu_ns": the policy thread's CPU time per hooked launch;
//  - "policy_wakes": futex calls per round that woke the policy thread (a
//    post to it napping: once per idle spell, and each round follows one);
//  - "events_per_launch": use events recorded per hooked launch.
// weights:0 names blocks not yet classified, as an activation would be:
// with moving:0, in a process where no spill was asked for yet (a job that
// fits on the device), its launches share their stream's use event; with
// moving:1, after a spill (of a block of its own), each launch records its
// use event, as an activation's does in a job that spills. weights:1 names
// blocks the policy found persistent, whose launches share their stream's
// use event either way (lazy use events).
bool spill_asked_for(const struct Setup& s);
// Called before each launch of both halves, outside its timing: a launch's
// pointers changed from one launch to the next (null: the same every time).
using BeforeLaunch = std::function<void()>;
void time_halves(benchmark::State& st, const struct Setup& s, void** params, bool hook,
                 const BeforeLaunch& before_launch = nullptr);
void BM_LaunchHookAdded(benchmark::State& st) {
  const Setup& s = setup();
  CUdeviceptr ptrs[8];
  void* params[8];
  if (!weights_launch(st, s, ptrs, params)) return;
  if (st.range(2) == 0 && s.engine->allocator_stats().spill_asked) {
    st.SkipWithError("a spill was asked for earlier in this process (moving:0 runs before moving:1 and BM_DemandFetchLaunch)");
    return;
  }
  if (st.range(2) != 0 && !spill_asked_for(s)) {
    st.SkipWithError("no spill could be made");
    return;
  }
  // moving:1 names blocks of its own, allocated after the last step marker:
  // the planner found every block that lived through a marked step
  // persistent (weights:1's warm-up marks steps), and classifies these only
  // at the next marker, which does not come.
  CUdeviceptr fresh[8] = {};
  if (st.range(2) != 0)
    for (int i = 0; i < 8; ++i) {
      if (s.engine->allocate(&fresh[i], kBlockBytes, nullptr)) std::abort();
      ptrs[i] = fresh[i] + 256;
    }
  time_halves(st, s, params, /*hook=*/true);
  for (CUdeviceptr p : fresh)
    if (p != 0 && s.engine->free_async(p, nullptr, [] { return CUDA_ERROR_NOT_FOUND; })) std::abort();
}

// BM_LaunchHookAdded's launch, but each launch names the next 8 of the live
// blocks in turn (as a step's kernels name tensors the launches just before
// did not), where BM_LaunchHookAdded names the same 8 every time (as a loop
// over one layer would): a block's use then finds its stream's open use
// event changed since the block was last named, and stores the new one.
// Before any spill was asked for, as moving:0: its launches share their
// stream's use event whatever the blocks' class.
// The launch of the Rotating benchmarks: 8 pointers, each launch the next 8
// of n live blocks from `base` on.
struct Rotation {
  CUdeviceptr ptrs[8];
  void* params[8];
  std::size_t n = 0, base = 0, next = 0;
  const std::vector<CUdeviceptr>* live = nullptr;

  // Over the first st.range(0) live blocks (an earlier benchmark may have
  // made more); false (the run skipped, saying why) where they do not fit
  // or a spill was asked for.
  bool start(benchmark::State& st, const Setup& s) {
    n = static_cast<std::size_t>(st.range(0));
    if (!fits(st, n)) return false;
    launch_args(n, ptrs, params);
    if (s.engine->allocator_stats().spill_asked) {
      st.SkipWithError("a spill was asked for earlier in this process (this runs before moving:1)");
      return false;
    }
    live = &blocks(n);
    return true;
  }
  void advance() {
    for (std::size_t i = 0; i < 8; ++i) ptrs[i] = (*live)[base + (next + i) % n] + 256;
    next = (next + 8) % n;
  }
};

void BM_LaunchHookAddedRotating(benchmark::State& st) {
  const Setup& s = setup();
  Rotation r;
  if (!r.start(st, s)) return;
  time_halves(st, s, r.params, /*hook=*/true, [&] { r.advance(); });
}

// BM_HookWorkOnly with BM_LaunchHookAddedRotating's launches: each names the
// next 8 of the first N live blocks in turn. The hook's own work, no driver
// launch and no other thread in the way (under the reactive policy): where
// a change to the use record shows with the least noise. Under the planner
// a tight loop outruns the policy thread (BM_HookWorkInBursts says why).
void BM_HookWorkOnlyRotating(benchmark::State& st) {
  const Setup& s = setup();
  Rotation r;
  if (!r.start(st, s)) return;
  auto call = [] { return CUDA_SUCCESS; };
  for (auto _ : st) {
    r.advance();
    if (s.engine->launch(s.f, nullptr, r.params, nullptr, call)) std::abort();
  }
  cuCtxSynchronize();
}

// BM_HookWorkOnlyRotating on several threads at once, each on a stream of
// its own naming blocks of its own (the first thread the first N live
// blocks, the next the N after them): what one thread's launch record costs
// the others, through whatever the threads share (a lock, a counter's line).
// Time per launch of one thread; compare with BM_HookWorkOnlyRotating.
void BM_HookWorkOnlyRotatingThreads(benchmark::State& st) {
  const Setup& s = setup();
  const std::size_t n = static_cast<std::size_t>(st.range(0));
  const std::size_t threads = static_cast<std::size_t>(st.threads());
  if (!fits(st, n * threads)) return;
  // Made by the thread that gets here first; the others find them made.
  static std::mutex making;
  const std::vector<CUdeviceptr>& live = [&]() -> const std::vector<CUdeviceptr>& {
    std::lock_guard<std::mutex> g(making);
    return blocks(n * threads);
  }();
  if (live.size() < n * threads || s.engine->allocator_stats().spill_asked) {
    st.SkipWithError("too few live blocks, or a spill was asked for earlier (this runs before moving:1)");
    return;
  }
  if (cuCtxSetCurrent(s.ctx)) std::abort();
  CUstream stream;
  if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) std::abort();
  Rotation r;
  for (int i = 0; i < 8; ++i) r.params[i] = &r.ptrs[i];
  r.n = n;
  r.base = static_cast<std::size_t>(st.thread_index()) * n;
  r.live = &live;
  auto call = [] { return CUDA_SUCCESS; };
  for (auto _ : st) {
    r.advance();
    if (s.engine->launch(s.f, stream, r.params, nullptr, call)) std::abort();
  }
  cuStreamSynchronize(stream);
  cuStreamDestroy(stream);
}

// The same 8-pointer launch timed as BM_LaunchHookAdded's halves are, direct
// in both: what the harness itself adds to the hooked half, which is 0
// within a nanosecond when the two halves are measured alike (it was 29 ns
// here while only the hooked half read the policy thread's CPU time from
// /proc around its round). A figure far from 0 says the added_* figures of
// this run cannot be trusted to that many nanoseconds.
void BM_HarnessNull(benchmark::State& st) {
  CUdeviceptr ptrs[8];
  void* params[8];
  if (!fits(st, static_cast<size_t>(st.range(0)))) return;
  launch_args(static_cast<size_t>(st.range(0)), ptrs, params);
  time_halves(st, setup(), params, /*hook=*/false);
}

void time_halves(benchmark::State& st, const Setup& s, void** params, bool hook, const BeforeLaunch& before_launch) {
  const std::uint64_t events_before = s.engine->allocator_stats().use_events;
  auto call = [&] { return TIERRT_CU(cuLaunchKernel, s.f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr); };
  constexpr int kRound = 256;
  std::vector<double> each[2];  // ns of each launch: direct, hooked
  for (auto& v : each) v.reserve(static_cast<std::size_t>(st.max_iterations) * kRound);
  using Clock = std::chrono::steady_clock;
  auto busy = [&] {
    st.PauseTiming();
    cuCtxSynchronize();
    if (TIERRT_CU(cuLaunchKernel, s.busy, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr)) std::abort();
    st.ResumeTiming();
  };
  long preempted[2] = {};
  std::uint64_t policy_ns = 0, policy_turns_hooked = 0, policy_wakes_hooked = 0, rounds = 0;
  auto round = [&](bool through_hook) {
    busy();
    const long p0 = preemptions();
    // Read around both halves, not the hooked one only: reading /proc costs
    // the launches that follow (29 ns each here when only one half did).
    const std::uint64_t c0 = threads_cpu_ns("tierrt-policy"), t0 = policy_turns(s), w0 = policy_wake_calls(s);
    auto before = Clock::now();
    for (int i = 0; i < kRound; ++i) {
      if (before_launch) {
        before_launch();
        before = Clock::now();
      }
      if (through_hook && hook ? s.engine->launch(s.f, nullptr, params, nullptr, call) : call()) std::abort();
      const auto after = Clock::now();
      each[through_hook].push_back(std::chrono::duration<double, std::nano>(after - before).count());
      before = after;
    }
    // The policy thread's share: what it spent while these launches went out
    // (it takes them from its ring every 50 us or 1 ms: policy_thread.h).
    const std::uint64_t c1 = threads_cpu_ns("tierrt-policy");
    if (through_hook)
      policy_ns += c1 - c0, policy_turns_hooked += policy_turns(s) - t0, policy_wakes_hooked += policy_wake_calls(s) - w0;
    preempted[through_hook] += preemptions() - p0;
  };
  for (auto _ : st) {
    // Which half goes first alternates, so that neither always follows the other.
    const bool hook_first = (rounds++ & 1) != 0;
    round(hook_first);
    round(!hook_first);
  }
  cuCtxSynchronize();
  const std::uint64_t events = s.engine->allocator_stats().use_events - events_before;
  if (rounds == 0) return;
  double sum[2] = {};
  for (int h = 0; h < 2; ++h)
    for (double ns : each[h]) sum[h] += ns;
  const double launches = static_cast<double>(each[1].size());
  const double direct_median = median(each[0]), hooked_median = median(each[1]);
  st.counters["direct_ns"] = direct_median;
  st.counters["hooked_ns"] = hooked_median;
  st.counters["added_ns"] = hooked_median - direct_median;
  st.counters["added_iqm_ns"] = interquartile_mean(each[1]) - interquartile_mean(each[0]);
  // The tail: what the slower launches add (a use event or the device
  // clock's record, a wake-up of tierrt's threads, the core lost).
  st.counters["added_p90_ns"] = quantile(each[1], 0.9) - quantile(each[0], 0.9);
  st.counters["added_p99_ns"] = quantile(each[1], 0.99) - quantile(each[0], 0.99);
  st.counters["added_p999_ns"] = quantile(each[1], 0.999) - quantile(each[0], 0.999);
  st.counters["added_mean_ns"] = (sum[1] - sum[0]) / launches;
  st.counters["hooked_over_direct"] = sum[0] > 0 ? sum[1] / sum[0] : 0;
  st.counters["clock_period"] = clock_period(s);
  st.counters["policy_cpu_ns"] = static_cast<double>(policy_ns) / launches;
  st.counters["policy_turns"] = static_cast<double>(policy_turns_hooked) / static_cast<double>(rounds);
  st.counters["policy_wakes"] = static_cast<double>(policy_wakes_hooked) / static_cast<double>(rounds);
  st.counters["preempted_direct"] = static_cast<double>(preempted[0]) / static_cast<double>(rounds);
  st.counters["preempted_hooked"] = static_cast<double>(preempted[1]) / static_cast<double>(rounds);
  st.counters["events_per_launch"] = static_cast<double>(events) / launches;
}

// Spills a block of its own (then frees it): from then on the allocator
// has been asked to move memory. False when the spill did not happen in 30 s.
bool spill_asked_for(const Setup& s) {
  if (s.engine->allocator_stats().spills_done > 0) return true;
  CUdeviceptr block = 0;
  if (s.engine->allocate(&block, kBlockBytes, nullptr) || TIERRT_CU(cuMemsetD8, block, 1, kBlockBytes)) std::abort();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (s.engine->allocator_stats().spills_done == 0 && std::chrono::steady_clock::now() < deadline) {
    (void)s.engine->advise(block, TIERRT_ADVISE_SPILL);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  cuCtxSynchronize();
  if (s.engine->free_async(block, nullptr, [] { return CUDA_ERROR_NOT_FOUND; })) std::abort();
  return s.engine->allocator_stats().spills_done > 0;
}

// A launch naming one spilled block of st.range(0) bytes: the block is
// spilled (outside the timing), then the launch fetches it on demand.
void BM_DemandFetchLaunch(benchmark::State& st) {
  const Setup& s = setup();
  const size_t bytes = static_cast<size_t>(st.range(0));
  CUdeviceptr block = 0;
  if (s.engine->allocate(&block, bytes, nullptr) || TIERRT_CU(cuMemsetD8, block, 1, bytes)) std::abort();
  CUdeviceptr ptrs[8];
  void* params[8];
  for (int i = 0; i < 8; ++i) {
    ptrs[i] = block;
    params[i] = &ptrs[i];
  }
  auto call = [&] { return TIERRT_CU(cuLaunchKernel, s.f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr); };
  auto spilled = [&] {
    return s.engine->allocator_stats().blocks[static_cast<int>(tierrt::alloc::State::Spilled)];
  };
  using Clock = std::chrono::steady_clock;
  double host_ns = 0, done_ns = 0;
  std::uint64_t fetches = 0;
  for (auto _ : st) {
    st.PauseTiming();
    cuCtxSynchronize();
    const std::uint64_t before = spilled();
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!s.engine->advise(block, TIERRT_ADVISE_SPILL) && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    while (spilled() == before && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (spilled() == before) std::abort();  // the block never spilled: nothing to measure
    st.ResumeTiming();
    const auto t0 = Clock::now();
    if (s.engine->launch(s.f, nullptr, params, nullptr, call)) std::abort();
    const auto t1 = Clock::now();
    st.PauseTiming();
    cuCtxSynchronize();
    const auto t2 = Clock::now();
    st.ResumeTiming();
    host_ns += std::chrono::duration<double, std::nano>(t1 - t0).count();
    done_ns += std::chrono::duration<double, std::nano>(t2 - t0).count();
    ++fetches;
  }
  if (fetches > 0) {
    st.counters["host_us"] = host_ns / static_cast<double>(fetches) / 1e3;
    st.counters["until_done_us"] = done_ns / static_cast<double>(fetches) / 1e3;
    st.counters["host_share"] = done_ns > 0 ? host_ns / done_ns : 0;
  }
  st.SetBytesProcessed(static_cast<int64_t>(fetches * bytes));
  if (s.engine->free_async(block, nullptr, [] { return CUDA_ERROR_NOT_FOUND; })) std::abort();
}

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
BENCHMARK(BM_HookWorkOnlyWithScalars)->Arg(100);
BENCHMARK(BM_HarnessNull)->ArgName("live")->Arg(1000)->Iterations(200);
// Not classified first: once found persistent, a block stays so.
BENCHMARK(BM_LaunchHookAdded)->ArgNames({"live", "weights", "moving"})
    ->Args({100, 0, 0})->Args({1000, 0, 0})->Args({10000, 0, 0})
    ->Args({100000, 0, 0})->Iterations(200);
BENCHMARK(BM_LaunchHookAdded)->ArgNames({"live", "weights", "moving"})
    ->Args({100, 1, 0})->Args({1000, 1, 0})->Args({10000, 1, 0})
    ->Args({100000, 1, 0})->Iterations(200);
BENCHMARK(BM_LaunchHookAddedRotating)->ArgName("live")->Arg(100)->Arg(1000)->Arg(10000)->Arg(100000)->Iterations(200);
BENCHMARK(BM_HookWorkOnlyRotating)->ArgName("live")->Arg(100)->Arg(1000)->Arg(10000)->Arg(100000);
BENCHMARK(BM_HookWorkOnlyRotatingThreads)->ArgName("live")->Arg(100)->Arg(1000)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_LaunchHookAdded)->ArgNames({"live", "weights", "moving"})
    ->Args({100, 0, 1})->Args({1000, 0, 1})->Args({10000, 0, 1})
    ->Args({100000, 0, 1})->Iterations(200);
// After the blocks were found persistent (the benchmarks share them).
BENCHMARK(BM_HookWorkOnlyOnWeights)->Arg(100)->Arg(1000)->Arg(10000);
BENCHMARK(BM_HookWorkInBursts)->ArgNames({"live", "weights"})->Args({1000, 1})->Iterations(2000);
BENCHMARK(BM_DemandFetchLaunch)->Arg(4 << 20)->Arg(64 << 20)->Iterations(20);
BENCHMARK(BM_AllocFreeDriver)->Arg(4 << 20)->Arg(64 << 20);
BENCHMARK(BM_AllocFreeTierrt)->Arg(4 << 20)->Arg(64 << 20);

}  // namespace

BENCHMARK_MAIN();
