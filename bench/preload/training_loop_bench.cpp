// End to end: a synthetic training loop whose activations do not fit the
// device budget, run four ways in one invocation, so that the ratios come
// from one machine at one time:
//   hbm              no tierrt, a device big enough for everything (the ideal)
//   manual-offload   no tierrt, device memory at the budget, activations
//                    offloaded by hand the way PyTorch's save_on_cpu does
//   tierrt-reactive  LD_PRELOAD=libtierrt.so, TIERRT_POLICY=reactive
//   tierrt-planner   LD_PRELOAD=libtierrt.so, TIERRT_POLICY=planner
// Each variant is a child process (this program re-executed with
// `--worker VARIANT`, training_loop_worker.cpp), so each gets a fresh driver
// and a fresh tierrt.
//
// The loop: L layers; forward allocates one activation per layer and a
// kernel writes a pattern into it; backward, in reverse, a kernel checks the
// pattern (counting mismatches on the device) and the activation is freed.
// Any mismatch fails the benchmark: correctness before speed.
//
// A Google Benchmark per variant and kernel duration
// (BM_TrainingLoop/VARIANT/kernel_us:N, in that order, so the baselines run
// first); one iteration is one child's run and its time is the child's
// median step after the warm-up steps. Counters:
//   step_ms, peak_dev_MiB      the median step and the device memory held
//   vs_hbm, vs_manual          step time over that of hbm / manual-offload
//                              (the median of their runs so far in this
//                              invocation, same kernel duration)
//   demand_share               tierrt: demand fetches over fetches, after
//                              the warm-up steps
//   demand_waited_share        tierrt: demand fetches whose launch's stream
//                              waited for the copy (the device's clock), over
//                              fetches, after the warm-up steps (a demand
//                              fetch of an application far ahead of the
//                              device may cost the device nothing)
//   prefetch_hit               tierrt: planned prefetches on time over
//                              planned prefetches, after the warm-up steps
//   spills, fetches            tierrt: moves in the run
//   created_per_fetch          tierrt: fetches that needed new device memory
//                              (cuMemCreate) over fetches, after the warm-up
//                              steps (0 when every fetch reused a spare chunk
//                              or a freed allocation's)
//   d2h_GBps, h2d_GBps         tierrt: copy rates it measured
// --benchmark_repetitions=5 gives medians of 5; a table of the medians
// follows the benchmarks' output.
//
// Kernels are host functions with a modeled duration, so this runs on
// simdev only for now; on NVIDIA's driver it says so and exits 0.
#include <benchmark/benchmark.h>
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
#include <string>
#include <vector>

#include "training_loop.h"

extern char** environ;

namespace training_loop {
namespace {

using Result = std::map<std::string, double>;

std::string mib_text(std::size_t bytes) { return std::to_string(bytes / kMiB) + "MiB"; }

// Whether Linux gives shared memory 2 MiB pages, which simdev asks for: with
// 4 KiB pages, a VM with shadow paging traps on each first access of a new
// mapping, and copies into memory just mapped run far below the link.
bool shared_memory_has_huge_pages() {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
  if (f == nullptr) return true;  // nothing to say
  char line[128] = {};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  return !read || std::strstr(line, "[never]") == nullptr;
}

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
  const std::size_t all_acts = std::size_t{sh.layers} * sh.act_bytes();
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

// Runs one variant; an empty string, or why it failed.
std::string run_child(const std::string& self, const std::string& variant, const Shape& sh,
                      const std::string& libtierrt, Result& out) {
  std::vector<std::string> argv_s = {self,
                                     "--worker", variant,
                                     "--layers", std::to_string(sh.layers),
                                     "--mib", std::to_string(sh.mib),
                                     "--steps", std::to_string(sh.steps),
                                     "--link-gbps", std::to_string(sh.link_gbps),
                                     "--kernel-us", std::to_string(sh.kernel_us)};
  std::vector<std::string> env_s = child_env(variant, sh, libtierrt);
  std::vector<char*> argv, envp;
  for (auto& s : argv_s) argv.push_back(s.data());
  for (auto& s : env_s) envp.push_back(s.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return "fork failed";
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
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return std::string(WIFEXITED(status) ? "exit status " : "signal ") +
           std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status)) + " (its reason is above)";
  auto at = text.find("result ");
  if (at == std::string::npos) return "no result line";
  // key=value pairs up to the end of the line.
  std::string line = text.substr(at + 7, text.find('\n', at) - at - 7);
  for (std::size_t p = 0; p < line.size();) {
    std::size_t end = std::min(line.find(' ', p), line.size()), eq = line.find('=', p);
    if (eq < end) out[line.substr(p, eq - p)] = std::strtod(line.substr(eq + 1, end - eq - 1).c_str(), nullptr);
    p = end + 1;
  }
  return out.count("median_ms") ? "" : "no median_ms in its result line";
}

// ---- the benchmarks ---------------------------------------------------------

struct Invocation {
  Args args;
  std::string self;
  // Every run so far, by (variant, kernel_us).
  std::map<std::pair<std::string, std::uint32_t>, std::vector<Result>> runs;
  int failures = 0;
};

Invocation& invocation() {
  static Invocation inv;
  return inv;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The median of `key` over a variant's runs so far; 0 without one.
double median_over_runs(const std::string& variant, std::uint32_t kernel_us, const char* key) {
  auto& runs = invocation().runs;
  auto it = runs.find({variant, kernel_us});
  if (it == runs.end()) return 0;
  std::vector<double> v;
  for (const Result& r : it->second)
    if (r.count(key)) v.push_back(r.at(key));
  return median_of(v);
}

// After the warm-up steps: those fetches `key` counts over fetches, and planned
// prefetches on time over planned prefetches (-1: none planned).
double share_of_fetches(const Result& r, const char* key) {
  const double fetched = r.at("steady_fetches");
  return fetched > 0 ? r.at(key) / fetched : 0;
}
double prefetch_hit(const Result& r) {
  const double planned = r.at("steady_prefetches");
  return planned > 0 ? std::max(0.0, planned - r.at("steady_late")) / planned : -1;
}

void BM_TrainingLoop(benchmark::State& st, const char* variant) {
  Invocation& inv = invocation();
  Shape sh = inv.args.shape;
  sh.kernel_us = static_cast<std::uint32_t>(st.range(0));
  for (auto _ : st) {
    Result r;
    const std::string failed = run_child(inv.self, variant, sh, inv.args.libtierrt, r);
    if (!failed.empty()) {
      st.SkipWithError((std::string(variant) + " failed: " + failed).c_str());
      ++inv.failures;
      return;
    }
    st.SetIterationTime(r.at("median_ms") / 1e3);
    inv.runs[{variant, sh.kernel_us}].push_back(r);
    st.counters["step_ms"] = r.at("median_ms");
    st.counters["peak_dev_MiB"] = r.at("peak") / kMiB;
    for (const char* base : {"hbm", "manual-offload"}) {
      const double base_ms = median_over_runs(base, sh.kernel_us, "median_ms");
      if (base_ms > 0 && std::strcmp(base, variant) != 0)
        st.counters[std::strcmp(base, "hbm") == 0 ? "vs_hbm" : "vs_manual"] = r.at("median_ms") / base_ms;
    }
    if (!r.count("tiered")) continue;
    st.counters["spills"] = r.at("spills");
    st.counters["fetches"] = r.at("fetches");
    st.counters["demand_share"] = share_of_fetches(r, "steady_demand");
    st.counters["demand_waited_share"] = share_of_fetches(r, "steady_demand_waited");
    st.counters["created_per_fetch"] = share_of_fetches(r, "steady_created");
    if (prefetch_hit(r) >= 0) st.counters["prefetch_hit"] = prefetch_hit(r);
    st.counters["d2h_GBps"] = r.at("d2h") / 1e9;
    st.counters["h2d_GBps"] = r.at("h2d") / 1e9;
  }
}

// ---- the table of medians -----------------------------------------------------

// The run whose step time is the median of the variant's runs (for its
// counters, which belong together).
const Result* median_run(const std::vector<Result>& runs) {
  if (runs.empty()) return nullptr;
  std::vector<const Result*> by_time;
  for (const Result& r : runs) by_time.push_back(&r);
  std::sort(by_time.begin(), by_time.end(),
            [](const Result* a, const Result* b) { return a->at("median_ms") < b->at("median_ms"); });
  return by_time[(by_time.size() - 1) / 2];
}

std::string ratio_text(double ms, double base_ms) {
  if (base_ms <= 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", ms / base_ms);
  return b;
}

std::string count_text(const Result& r, const char* key) {
  return r.count("tiered") ? std::to_string(static_cast<unsigned long long>(r.at(key))) : "-";
}

void print_table(std::uint32_t kernel_us) {
  const Invocation& inv = invocation();
  auto runs_of = [&](const char* v) -> const std::vector<Result>* {
    auto it = inv.runs.find({v, kernel_us});
    return it == inv.runs.end() ? nullptr : &it->second;
  };
  const double hbm_ms = median_over_runs("hbm", kernel_us, "median_ms");
  const double manual_ms = median_over_runs("manual-offload", kernel_us, "median_ms");
  std::printf("\nkernels of %u us (medians over each variant's runs):\n", kernel_us);
  std::printf("%-16s %5s %10s %8s %10s %13s %7s %8s %7s\n", "variant", "runs", "step ms", "vs hbm", "vs manual",
              "peak dev MiB", "spills", "fetches", "demand");
  for (const char* v : kVariants) {
    const std::vector<Result>* runs = runs_of(v);
    const Result* r = runs ? median_run(*runs) : nullptr;
    if (!r) {
      std::printf("%-16s %5s %10s\n", v, "0", "not run or failed");
      continue;
    }
    const double ms = median_over_runs(v, kernel_us, "median_ms");
    std::printf("%-16s %5zu %10.2f %8s %10s %13.0f %7s %8s %7s\n", v, runs->size(), ms,
                ratio_text(ms, hbm_ms).c_str(), ratio_text(ms, manual_ms).c_str(), r->at("peak") / kMiB,
                count_text(*r, "spills").c_str(), count_text(*r, "fetches").c_str(), count_text(*r, "demand").c_str());
  }
  for (const char* v : kVariants) {
    const std::vector<Result>* runs = runs_of(v);
    const Result* r = runs ? median_run(*runs) : nullptr;
    if (!r || !r->count("tiered")) continue;
    std::printf("%s: %.0f MiB peak without tiering; %.0f prefetches late", v, r->at("untiered") / kMiB, r->at("late"));
    if (r->at("planned_spills") + r->at("planned_prefetches") > 0)
      std::printf("; planner started %.0f spills, %.0f prefetches (%.0f by the launching thread)",
                  r->at("planned_spills"), r->at("planned_prefetches"), r->at("by_launchers"));
    if (r->at("handed_over") > 0)
      std::printf("; %.0f fetches took freed memory in stream order", r->at("handed_over"));
    std::printf("; copies measured %.2f GB/s out, %.2f GB/s in\n", r->at("d2h") / 1e9, r->at("h2d") / 1e9);
    std::printf("  after %u warm-up steps: demand fetches %.0f of %.0f (%.1f%%; %.0f made their stream wait)",
                kWarmupSteps, r->at("steady_demand"), r->at("steady_fetches"), 100.0 * share_of_fetches(*r, "steady_demand"),
                r->at("steady_demand_waited"));
    if (prefetch_hit(*r) >= 0)
      std::printf("; prefetch hit rate %.1f%% of %.0f planned prefetches", 100.0 * prefetch_hit(*r),
                  r->at("steady_prefetches"));
    std::printf("; %.0f fetches needed new device memory (cuMemCreate)\n", r->at("steady_created"));
    // Below the modeled link, copies were bound by the host (memcpy, page
    // faults), not by the link: a cost of the simulation as much as tierrt's.
    const double slowest = std::min(r->at("d2h"), r->at("h2d")) / 1e9;
    if (slowest > 0 && slowest < inv.args.shape.link_gbps / 2)
      std::printf("  note: under half the modeled %g GB/s: these copies were host-bound, not link-bound%s\n",
                  inv.args.shape.link_gbps,
                  shared_memory_has_huge_pages() ? ""
                                                 : " (simdev's memory has 4 KiB pages here: "
                                                   "/sys/kernel/mm/transparent_hugepage/shmem_enabled is never; "
                                                   "see simdev/README.md)");
  }
}

// How long this host takes to memcpy one activation between warm buffers:
// the floor under every simulated copy, whatever the modeled link says.
double host_memcpy_us(std::size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::vector<double> us;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    a[i] = b[bytes - 1 - i];  // keep the copies observable
  }
  return median_of(us);
}

void print_setup(const Args& a) {
  const Shape& sh = a.shape;
  const double acts = static_cast<double>(sh.layers) * sh.mib;
  std::printf("device: simdev, a simulated device: copies are host memcpy throttled to the modeled link and\n"
              "kernels are host functions that hold their stream for a modeled time. These are not GPU figures.\n");
  std::printf("shape: %u layers x %u MiB activations (%.0f MiB per step), %u steps, median of the last %u\n",
              sh.layers, sh.mib, acts, sh.steps, sh.steps - kWarmupSteps);
  std::printf("link: %g GB/s each way, %.0f us per activation copy; kernels:", sh.link_gbps, sh.copy_us());
  for (std::uint32_t k : a.kernel_us) {
    const double ratio = k / sh.copy_us();
    std::printf(" %u us (%.1fx a copy%s; compute floor %.1f ms per step)", k, ratio,
                ratio < 2 ? ", too short to hide the copies" : "", 2.0 * sh.layers * k / 1000);
  }
  std::printf("\nbudget: %zu MiB of device memory (tierrt: TIERRT_DEVICE_BUDGET on a %zu MiB device; "
              "manual-offload: a %zu MiB device); hbm: a %zu MiB device\n",
              sh.budget() / kMiB, sh.budget() * 3 / 2 / kMiB, sh.budget() / kMiB,
              (2 * std::size_t{sh.layers} * sh.act_bytes() + 64 * kMiB) / kMiB);
  const double memcpy_us = host_memcpy_us(sh.act_bytes());
  std::printf("host: memcpy of one activation takes %.0f us here%s\n", memcpy_us,
              memcpy_us * 1.5 > sh.copy_us() ? ", close to or above the modeled copy: the model does not hold"
                                               ", lower --link-gbps"
                                             : "");
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TIERRT_", 7) == 0 && !variant_key(*e)) std::printf("passed to tierrt: %s\n", *e);
  std::fflush(stdout);
}

int run_driver(int argc, char** argv, Args a) {
  if (!dlsym(RTLD_DEFAULT, "simdev_device_bytes_in_use")) {
    std::printf("%s: the end-to-end benchmark needs simdev for now (its kernels are host functions); skipped\n",
                kProg);
    return 0;
  }
  Invocation& inv = invocation();
  inv.self = std::filesystem::read_symlink("/proc/self/exe").string();
  if (a.libtierrt.empty())  // the build tree: bench/preload/ next to preload/
    a.libtierrt = (std::filesystem::path(inv.self).parent_path() / "../../preload/libtierrt.so").lexically_normal();
  if (!std::filesystem::exists(a.libtierrt)) die("no libtierrt.so at " + a.libtierrt + " (pass --libtierrt PATH)");
  inv.args = a;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  print_setup(a);
  for (std::uint32_t k : a.kernel_us)
    for (const char* v : kVariants)
      benchmark::RegisterBenchmark((std::string("BM_TrainingLoop/") + v).c_str(), BM_TrainingLoop, v)
          ->Arg(k)
          ->ArgName("kernel_us")
          ->Iterations(1)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (std::uint32_t k : a.kernel_us) {
    bool ran = false;
    for (const char* v : kVariants) ran |= inv.runs.count({v, k}) > 0;
    if (ran) print_table(k);
  }
  return inv.failures != 0 ? 1 : 0;
}

}  // namespace
}  // namespace training_loop

int main(int argc, char** argv) {
  using namespace training_loop;
  const Args a = parse_args(&argc, argv);
  return a.worker.empty() ? run_driver(argc, argv, a) : run_worker(a);
}
