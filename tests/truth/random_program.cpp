// A random CUDA driver-API program with a fixed seed: threads on their
// per-thread default streams and non-blocking streams allocate and free
// blocks (stream-ordered too, across streams), copy, memset, launch kernels
// on them directly and through pointer tables in device memory, capture and
// replay graphs, and read every block back against a host mirror of what it
// must hold. Optionally, a fault is armed at a random driver function every
// few operations. Correct on a GPU as well as on simdev; run with and without
// LD_PRELOAD=libtierrt.so, it must give the same bytes.
//
//   random_program [seed=N] [ops=N] [threads=N] [faults=0|1] [fault-every=N]
//                  [graphs=0|1] [tables=0|1] [cap-mib=N] [fail=NAME:NTH]
//                  [tierrt=absent|present|spills|any]
//
// tierrt=spills: tierrt must be running and must have spilled blocks and
// fetched them back; present: running (observe mode); absent: not loaded;
// any: whichever (a fault may have turned tierrt off, which it says).
//
// fail=NAME:NTH (a point of the fault matrix, docs/fault-matrix.md): the
// NTH call of driver function NAME from the start, the program's own or
// tierrt's on its behalf, fails; the run fails too if it was never reached.
// Exit status 0: no wrong byte, every error the program saw is one the
// driver documents for that call while faults were armed, and no more calls
// failed than faults were armed.
#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "driver_table.h"
#include "kernels.h"
#include "simdev/simdev.h"
#include "tierrt/tierrt.h"
#include "worker.h"

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "random_program: %s\n", why.c_str());
  std::exit(2);
}

uint64_t number(const std::string& key, const std::string& value) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || *end) usage(key + "=" + value + " is not a number");
  return v;
}

struct Settings {
  truth::Options options;
  std::string tierrt = "absent";
  std::string fail_name;  // fail=NAME:NTH, or empty
  uint64_t fail_nth = 0;
};

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    if (eq == std::string::npos) usage("arguments are key=value: " + arg);
    const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    if (key == "seed") s.options.seed = number(key, value);
    else if (key == "ops") s.options.ops = number(key, value);
    else if (key == "threads") s.options.threads = static_cast<unsigned>(number(key, value));
    else if (key == "faults") s.options.faults = number(key, value) != 0;
    else if (key == "fault-every") s.options.fault_every = static_cast<unsigned>(number(key, value));
    else if (key == "graphs") s.options.graphs = number(key, value) != 0;
    else if (key == "tables") s.options.tables = number(key, value) != 0;
    else if (key == "cap-mib") s.options.cap_bytes = number(key, value) << 20;
    else if (key == "fail") {
      const auto colon = value.find(':');
      if (colon == std::string::npos || colon == 0) usage("fail=" + value + " is not NAME:NTH");
      s.fail_name = value.substr(0, colon);
      s.fail_nth = number(key, value.substr(colon + 1));
      if (s.fail_nth == 0) usage("fail=" + value + ": NTH counts from 1");
    } else if (key == "tierrt" && (value == "absent" || value == "present" || value == "spills" || value == "any"))
      s.tierrt = value;
    else usage("unknown argument " + arg);
  }
  if (s.options.threads == 0 || s.options.fault_every == 0) usage("threads and fault-every must be at least 1");
  return s;
}

// tierrt's public stats, looked up at run time: absent without tierrt.
bool tierrt_stats_now(tierrt_stats* st) {
  auto get = reinterpret_cast<int (*)(tierrt_stats*)>(dlsym(RTLD_DEFAULT, "tierrt_get_stats"));
  std::memset(st, 0, sizeof *st);
  st->struct_size = sizeof *st;
  return get && get(st) == 0;
}

void print_summary(const truth::Tally& t) {
  std::string ops, errors;
  for (const auto& [k, v] : t.ops) ops += " " + k + "=" + std::to_string(v);
  for (const auto& [k, v] : t.errors) errors += " [" + k + "]=" + std::to_string(v);
  std::printf("ops:%s\nfaults armed: %llu\nerrors seen:%s\nbytes checked: %llu, left unknown by failed calls: %llu, "
              "wrong bytes: %llu\n",
              ops.c_str(), static_cast<unsigned long long>(t.faults_armed), errors.empty() ? " none" : errors.c_str(),
              static_cast<unsigned long long>(t.bytes_checked), static_cast<unsigned long long>(t.bytes_unknown),
              static_cast<unsigned long long>(t.wrong_bytes));
}

// What tierrt did, and whether that is what this run asked of it.
bool tierrt_as_expected(const std::string& expect) {
  tierrt_stats st;
  const bool running = tierrt_stats_now(&st);
  if (running)
    std::printf("tierrt: %llu allocations, %llu spills (%llu bytes), %llu fetches (%llu on demand, %llu bytes), "
                "%llu launches seen, device peak %llu MiB of budget %llu MiB\n",
                static_cast<unsigned long long>(st.allocations), static_cast<unsigned long long>(st.spills),
                static_cast<unsigned long long>(st.bytes_spilled), static_cast<unsigned long long>(st.fetches),
                static_cast<unsigned long long>(st.demand_fetches), static_cast<unsigned long long>(st.bytes_fetched),
                static_cast<unsigned long long>(st.launches_seen),
                static_cast<unsigned long long>(st.device_peak_bytes >> 20),
                static_cast<unsigned long long>(st.device_budget >> 20));
  if (expect == "any") return true;
  if (expect == "absent" && running) {
    std::fprintf(stderr, "random_program: tierrt is running, but this run is meant to go without it\n");
    return false;
  }
  if (expect != "absent" && !running) {
    std::fprintf(stderr, "random_program: tierrt is not running\n");
    return false;
  }
  if (expect == "spills" && (st.spills == 0 || st.bytes_fetched == 0)) {
    std::fprintf(stderr, "random_program: no block was spilled and fetched back: the run did not test tiering\n");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const Settings settings = parse(argc, argv);
  const truth::Options& o = settings.options;
  const truth::Driver d = truth::load_driver_per_thread_default_stream();
  CUdevice dev;
  CUcontext ctx;
  if (d.init(0) != CUDA_SUCCESS || d.device_get(&dev, 0) != CUDA_SUCCESS ||
      d.primary_ctx_retain(&ctx, dev) != CUDA_SUCCESS || d.ctx_set_current(ctx) != CUDA_SUCCESS)
    usage("no CUDA device");
  const truth::Kernels kernels = truth::load_kernels(d);

  std::atomic<bool> faults_possible{false};
  std::vector<std::unique_ptr<truth::Worker>> workers;
  for (unsigned i = 0; i < o.threads; ++i)
    workers.push_back(std::make_unique<truth::Worker>(d, kernels, o, i, faults_possible));
  const bool point = !settings.fail_name.empty();
  if (point && simdev_try_inject_fault(settings.fail_name.c_str(), settings.fail_nth, 0) != 0)
    usage("simdev cannot fail " + settings.fail_name);
  faults_possible = o.faults || point;
  // Between the random phase and the final read-back, no fault stays armed.
  unsigned long long fired = 0;
  std::barrier all_done(static_cast<std::ptrdiff_t>(o.threads), [&]() noexcept {
    fired = simdev_try_faults_fired();
    simdev_try_clear_faults();
    faults_possible = false;
  });
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < o.threads; ++i)
    threads.emplace_back([&, i] {
      truth::Worker& w = *workers[i];
      w.enter(ctx);
      w.run_ops(o.ops / o.threads + (i < o.ops % o.threads ? 1 : 0));
      all_done.arrive_and_wait();
      w.check_and_release();
    });
  for (auto& t : threads) t.join();

  truth::Tally total;
  for (const auto& w : workers) total.merge(w->tally());
  if (point) ++total.faults_armed;
  std::printf("random program: seed %llu, %llu operations on %u threads, faults %s, graphs %s, pointer tables %s\n",
              static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(o.ops), o.threads,
              o.faults ? "on" : "off", o.graphs ? "on" : "off", o.tables ? "on" : "off");
  print_summary(total);
  const bool tiering_ok = tierrt_as_expected(settings.tierrt);
  // A point of the matrix that was never reached tested nothing.
  const bool point_reached = !point || fired > 0;
  if (point)
    std::printf("fault point %s:%llu %s\n", settings.fail_name.c_str(), static_cast<unsigned long long>(settings.fail_nth),
                point_reached ? "reached" : "never reached");
  if (!point_reached)
    std::fprintf(stderr, "random_program: FAILED: call %llu of %s never came: this point is not on the run's path\n",
                 static_cast<unsigned long long>(settings.fail_nth), settings.fail_name.c_str());
  if (total.wrong_bytes != 0) std::fprintf(stderr, "random_program: FAILED: wrong bytes\n");
  // Each documented error was allowed one at a time; in all, the faults must
  // account for them, or something between the program and the driver
  // failed calls of its own.
  const bool errors_explained = total.failed_calls <= total.faults_armed;
  if (!errors_explained)
    std::fprintf(stderr, "random_program: FAILED: %llu calls failed, more than the %llu faults armed\n",
                 static_cast<unsigned long long>(total.failed_calls),
                 static_cast<unsigned long long>(total.faults_armed));
  return total.wrong_bytes == 0 && tiering_ok && errors_explained && point_reached ? 0 : 1;
}
