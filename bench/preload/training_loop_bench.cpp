// End to end: a synthetic training loop whose activations do not fit the
// device budget, run four ways in one invocation, so that the ratios come
// from one machine at one time:
//   hbm              no tierrt, a device big enough for everything (the ideal)
//   manual-offload   no tierrt, device memory at the budget, activations
//                    offloaded by hand the way PyTorch's save_on_cpu does
//   tierrt-reactive  LD_PRELOAD=libtierrt.so, TIERRT_POLICY=reactive
//   tierrt-planner   LD_PRELOAD=libtierrt.so, TIERRT_POLICY=planner
// Each variant is a child process (this program re-executed with
// `--worker VARIANT`), so each gets a fresh driver and a fresh tierrt.
//
// The loop: L layers; forward allocates one activation per layer and a
// kernel writes a pattern into it; backward, in reverse, a kernel checks the
// pattern (counting mismatches on the device) and the activation is freed.
// Any mismatch aborts the worker: correctness before speed.
//
// Kernels are host functions with a modeled duration, so this runs on
// simdev only for now; on NVIDIA's driver it says so and exits 0.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "simdev/simdev.h"
#include "tierrt/tierrt.h"

extern char** environ;

namespace {

constexpr const char* kProg = "training_loop_bench";
constexpr const char* kVariants[] = {"hbm", "manual-offload", "tierrt-reactive", "tierrt-planner"};
constexpr uint32_t kWarmupSteps = 2;  // first steps: page faults, caches, the planner learning
constexpr size_t kMiB = size_t{1} << 20;

struct Shape {
  uint32_t layers = 16;
  uint32_t mib = 8;
  uint32_t steps = 12;
  // Slower than PCIe: simdev's copies are host memcpy, and on a small host
  // that alone takes about as long as 8 MiB over a 16 GB/s link, so the
  // model would not hold. Kernels 2.4x a copy: hiding copies is possible.
  double link_gbps = 4;
  uint32_t kernel_us = 5000;

  size_t act_bytes() const { return size_t{mib} * kMiB; }
  // Half a step's activations plus two of slack: about half must leave.
  size_t budget() const { return (size_t{layers} / 2 + 2) * act_bytes(); }
  double copy_us() const { return static_cast<double>(act_bytes()) / (link_gbps * 1e3); }
};

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", kProg, why.c_str());
  std::exit(1);
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) die(std::string(what) + " failed with CUresult " + std::to_string(r));
}

// ---- command line ---------------------------------------------------------

// One-line rejection naming the flag, as tierrt's settings do.
[[noreturn]] void bad_flag(const std::string& flag, const std::string& value, const char* accepted) {
  std::fprintf(stderr, "%s: %s: '%s' is not %s\n", kProg, flag.c_str(), value.c_str(), accepted);
  std::exit(2);
}

uint32_t parse_uint(const std::string& flag, const std::string& v, uint32_t lo, uint32_t hi) {
  char* end = nullptr;
  unsigned long long x = v.empty() || v[0] == '-' ? 0 : std::strtoull(v.c_str(), &end, 10);
  if (!end || *end || x < lo || x > hi)
    bad_flag(flag, v, ("an integer from " + std::to_string(lo) + " to " + std::to_string(hi)).c_str());
  return static_cast<uint32_t>(x);
}

double parse_gbps(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(x >= 0.1 && x <= 10000)) bad_flag(flag, v, "a rate in GB/s from 0.1 to 10000");
  return x;
}

struct Args {
  Shape shape;
  std::string worker;    // empty: run as the driver
  std::string libtierrt; // empty: next to this program in the build tree
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "--help" || flag == "-h") {
      std::printf("usage: %s [--layers N] [--mib N] [--steps N] [--link-gbps X] [--kernel-us N] [--libtierrt PATH]\n",
                  kProg);
      std::exit(0);
    }
    if (auto eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "%s: %s needs a value\n", kProg, flag.c_str());
      std::exit(2);
    }
    if (flag == "--layers") a.shape.layers = parse_uint(flag, value, 2, 1024);
    else if (flag == "--mib") a.shape.mib = parse_uint(flag, value, 2, 1024);
    else if (flag == "--steps") a.shape.steps = parse_uint(flag, value, kWarmupSteps + 1, 10000);
    else if (flag == "--link-gbps") a.shape.link_gbps = parse_gbps(flag, value);
    else if (flag == "--kernel-us") a.shape.kernel_us = parse_uint(flag, value, 1, 10000000);
    else if (flag == "--libtierrt") a.libtierrt = value;
    else if (flag == "--worker") a.worker = value;
    else {
      std::fprintf(stderr, "%s: unknown flag %s (see --help)\n", kProg, flag.c_str());
      std::exit(2);
    }
  }
  return a;
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
                " planned_spills=%llu planned_prefetches=%llu d2h=%llu h2d=%llu",
                ull{st.peak_bytes_untiered}, ull{st.spills}, ull{st.fetches}, ull{st.demand_fetches},
                ull{st.late_fetches}, ull{st.planned_spills}, ull{st.planned_prefetches}, ull{st.d2h_bytes_per_s},
                ull{st.h2d_bytes_per_s});
  if (tiered)  // after the warm-up steps
    std::printf(" steady_fetches=%llu steady_demand=%llu steady_prefetches=%llu steady_late=%llu",
                ull{st.fetches - warm.fetches}, ull{st.demand_fetches - warm.demand_fetches},
                ull{st.planned_prefetches - warm.planned_prefetches}, ull{st.late_fetches - warm.late_fetches});
  std::printf("\n");
  std::fflush(stdout);
  return 0;
}

// ---- the driver: one child per variant --------------------------------------

using Result = std::map<std::string, double>;

std::string mib_text(size_t bytes) { return std::to_string(bytes / kMiB) + "MiB"; }

// What each variant sets itself; the rest of our environment passes through,
// so TIERRT_SPILL_MODE=copy or TIERRT_STATS=- reach the tierrt variants.
constexpr const char* kVariantKeys[] = {"LD_PRELOAD",      "SIMDEV_MEM",           "SIMDEV_H2D_GBPS",
                                        "SIMDEV_D2H_GBPS", "TIERRT_DEVICE_BUDGET", "TIERRT_POLICY"};

bool variant_key(const std::string& kv) {
  for (const char* k : kVariantKeys)
    if (kv.rfind(std::string(k) + "=", 0) == 0) return true;
  return false;
}

std::vector<std::string> child_env(const std::string& variant, const Shape& sh, const std::string& libtierrt) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (!variant_key(*e)) env.push_back(*e);
  char gbps[32];
  std::snprintf(gbps, sizeof gbps, "%g", sh.link_gbps);
  env.push_back(std::string("SIMDEV_H2D_GBPS=") + gbps);
  env.push_back(std::string("SIMDEV_D2H_GBPS=") + gbps);
  const size_t all_acts = size_t{sh.layers} * sh.act_bytes();
  if (variant == "hbm") {
    env.push_back("SIMDEV_MEM=" + mib_text(2 * all_acts + 64 * kMiB));
  } else if (variant == "manual-offload") {
    env.push_back("SIMDEV_MEM=" + mib_text(sh.budget()));
  } else {
    env.push_back("SIMDEV_MEM=" + mib_text(sh.budget() * 3 / 2));
    env.push_back("LD_PRELOAD=" + libtierrt);
    env.push_back("TIERRT_DEVICE_BUDGET=" + mib_text(sh.budget()));
    env.push_back(std::string("TIERRT_POLICY=") + (variant == "tierrt-reactive" ? "reactive" : "planner"));
  }
  return env;
}

// Runs one variant; false (with the reason printed) when it failed.
bool run_child(const std::string& self, const std::string& variant, const Args& a, Result& out) {
  const Shape& sh = a.shape;
  std::vector<std::string> argv_s = {self,
                                     "--worker", variant,
                                     "--layers", std::to_string(sh.layers),
                                     "--mib", std::to_string(sh.mib),
                                     "--steps", std::to_string(sh.steps),
                                     "--link-gbps", std::to_string(sh.link_gbps),
                                     "--kernel-us", std::to_string(sh.kernel_us)};
  std::vector<std::string> env_s = child_env(variant, sh, a.libtierrt);
  std::vector<char*> argv, envp;
  for (auto& s : argv_s) argv.push_back(s.data());
  for (auto& s : env_s) envp.push_back(s.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  int fds[2];
  if (pipe(fds) != 0) die("pipe failed");
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) die("fork failed");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execve(self.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "%s: variant %s failed (%s %d)\n", kProg, variant.c_str(),
                 WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return false;
  }
  auto at = text.find("result ");
  if (at == std::string::npos) {
    std::fprintf(stderr, "%s: variant %s printed no result\n", kProg, variant.c_str());
    return false;
  }
  // key=value pairs up to the end of the line.
  std::string line = text.substr(at + 7, text.find('\n', at) - at - 7);
  for (size_t p = 0; p < line.size();) {
    size_t end = std::min(line.find(' ', p), line.size()), eq = line.find('=', p);
    if (eq < end) out[line.substr(p, eq - p)] = std::strtod(line.substr(eq + 1, end - eq - 1).c_str(), nullptr);
    p = end + 1;
  }
  return out.count("median_ms") > 0;
}

std::string ratio(const Result& r, const Result* base) {
  if (!base || r.empty()) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", r.at("median_ms") / base->at("median_ms"));
  return b;
}

std::string count(const Result& r, const char* key) {
  return r.count("tiered") ? std::to_string(static_cast<unsigned long long>(r.at(key))) : "-";
}

void print_table(const std::map<std::string, Result>& results, double link_gbps) {
  auto find = [&](const char* v) { return results.count(v) ? &results.at(v) : nullptr; };
  const Result *hbm = find("hbm"), *manual = find("manual-offload");
  std::printf("\n%-16s %10s %8s %10s %13s %7s %8s %7s\n", "variant", "step ms", "vs hbm", "vs manual",
              "peak dev MiB", "spills", "fetches", "demand");
  for (const char* v : kVariants) {
    const Result* r = find(v);
    if (!r) {
      std::printf("%-16s %10s\n", v, "FAILED");
      continue;
    }
    std::printf("%-16s %10.2f %8s %10s %13.0f %7s %8s %7s\n", v, r->at("median_ms"), ratio(*r, hbm).c_str(),
                ratio(*r, manual).c_str(), r->at("peak") / kMiB, count(*r, "spills").c_str(),
                count(*r, "fetches").c_str(), count(*r, "demand").c_str());
  }
  for (const char* v : kVariants) {
    const Result* r = find(v);
    if (!r || !r->count("tiered")) continue;
    std::printf("%s: %.0f MiB peak without tiering; %.0f prefetches late", v, r->at("untiered") / kMiB,
                r->at("late"));
    if (r->at("planned_spills") + r->at("planned_prefetches") > 0)
      std::printf("; planner started %.0f spills, %.0f prefetches", r->at("planned_spills"),
                  r->at("planned_prefetches"));
    std::printf("; copies measured %.2f GB/s out, %.2f GB/s in\n", r->at("d2h") / 1e9, r->at("h2d") / 1e9);
    // The steady state, after the warm-up steps: what share of fetches a
    // launch had to wait for, and what share of the planner's prefetches
    // were done in time.
    const double fetched = r->at("steady_fetches"), prefetched = r->at("steady_prefetches");
    std::printf("  after %u warm-up steps: demand fetches %.0f of %.0f (%.1f%%)", kWarmupSteps, r->at("steady_demand"),
                fetched, fetched > 0 ? 100.0 * r->at("steady_demand") / fetched : 0.0);
    if (prefetched > 0)
      std::printf("; prefetch hit rate %.1f%% (%.0f of %.0f planned prefetches on time)",
                  100.0 * std::max(0.0, prefetched - r->at("steady_late")) / prefetched,
                  std::max(0.0, prefetched - r->at("steady_late")), prefetched);
    std::printf("\n");
    // Below the modeled link, copies were bound by the host (memcpy, page
    // faults), not by the link: a cost of the simulation as much as tierrt's.
    const double slowest = std::min(r->at("d2h"), r->at("h2d")) / 1e9;
    if (slowest > 0 && slowest < link_gbps / 2)
      std::printf("  note: under half the modeled %g GB/s: these copies were host-bound, not link-bound\n",
                  link_gbps);
  }
}

// How long this host takes to memcpy one activation between warm buffers:
// the floor under every simulated copy, whatever the modeled link says.
double host_memcpy_us(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::vector<double> us;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    a[i] = b[bytes - 1 - i];  // keep the copies observable
  }
  std::sort(us.begin(), us.end());
  return us[2];
}

void print_setup(const Shape& sh) {
  const double acts = static_cast<double>(sh.layers) * sh.mib;
  std::printf("device: simdev, a simulated device: copies are host memcpy throttled to the modeled link and\n"
              "kernels are host functions that hold their stream for a modeled time. These are not GPU figures.\n");
  std::printf("shape: %u layers x %u MiB activations (%.0f MiB per step), %u steps, median of the last %u\n",
              sh.layers, sh.mib, acts, sh.steps, sh.steps - kWarmupSteps);
  const double ratio = sh.kernel_us / sh.copy_us();
  std::printf("link: %g GB/s each way, %.0f us per activation copy; kernels: %u us each "
              "(%.1fx a copy%s; compute floor %.1f ms per step)\n",
              sh.link_gbps, sh.copy_us(), sh.kernel_us, ratio, ratio < 2 ? ", too short to hide the copies" : "",
              2.0 * sh.layers * sh.kernel_us / 1000);
  std::printf("budget: %zu MiB of device memory (tierrt: TIERRT_DEVICE_BUDGET on a %zu MiB device; "
              "manual-offload: a %zu MiB device); hbm: a %zu MiB device\n",
              sh.budget() / kMiB, sh.budget() * 3 / 2 / kMiB, sh.budget() / kMiB,
              (2 * size_t{sh.layers} * sh.act_bytes() + 64 * kMiB) / kMiB);
  const double memcpy_us = host_memcpy_us(sh.act_bytes());
  std::printf("host: memcpy of one activation takes %.0f us here%s\n", memcpy_us,
              memcpy_us * 1.5 > sh.copy_us() ? ", close to or above the modeled copy: the model does not hold"
                                               ", lower --link-gbps"
                                             : "");
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TIERRT_", 7) == 0 && !variant_key(*e)) std::printf("passed to tierrt: %s\n", *e);
}

int run_driver(Args a) {
  if (!dlsym(RTLD_DEFAULT, "simdev_device_bytes_in_use")) {
    std::printf("%s: the end-to-end benchmark needs simdev for now (its kernels are host functions); skipped\n",
                kProg);
    return 0;
  }
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  if (a.libtierrt.empty())  // the build tree: bench/preload/ next to preload/
    a.libtierrt = (std::filesystem::path(self).parent_path() / "../../preload/libtierrt.so").lexically_normal();
  if (!std::filesystem::exists(a.libtierrt)) die("no libtierrt.so at " + a.libtierrt + " (pass --libtierrt PATH)");
  print_setup(a.shape);

  std::map<std::string, Result> results;
  bool ok = true;
  for (const char* v : kVariants) {
    auto t0 = std::chrono::steady_clock::now();
    Result r;
    if (!run_child(self, v, a, r)) {
      ok = false;
      continue;
    }
    results[v] = r;
    std::printf("  %-16s done in %.1f s: %.0f activations, every one verified\n", v,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), r.at("checked"));
  }
  print_table(results, a.shape.link_gbps);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse_args(argc, argv);
  return a.worker.empty() ? run_driver(a) : run_worker(a);
}
