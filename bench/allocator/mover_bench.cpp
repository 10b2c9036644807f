// The mover against the modeled link (suite 'allocator'): 64 MiB blocks
// spilled and fetched through the real allocator, in remap and copy mode, on
// whatever libcuda.so.1 is loaded (simdev, with SIMDEV_H2D_GBPS /
// SIMDEV_D2H_GBPS set by meson.build; the benchmark reads them only to report
// against them).
//
// - one_way: a spill, finalised, then the fetch of the same block: one
//   direction on the link at a time;
// - both: one block spills while another is fetched, both directions on the
//   link at once (a real GPU has a copy engine per direction).
//
// Counters, per direction (d2h: spills, h2d: fetches), GB/s = 1e9 bytes/s:
// - <dir>_modeled_GBps: the modeled link;
// - <dir>_GBps and <dir>_over_modeled: bytes over the wall time of the whole
//   move, from the call until the move is finalised (a spill) or its bytes
//   are usable on the consumer's stream (a fetch), mapping and bookkeeping
//   included;
// - <dir>_copy_GBps and <dir>_copy_over_modeled: bytes over the copy's time
//   on the device as the mover measures it (MoveObserver::copy_done), the
//   link rate the runtime's policy is told;
// - cpu_ms: CPU time of the whole process (every thread: the copies' memmove,
//   page faults, mapping) per iteration, which a loaded host does not
//   inflate as it does wall time; a 64 MiB memmove alone is ~10 ms of it.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "allocator/allocator.h"
#include "bench/allocator/bench_context.h"
#include "driver/driver.h"

namespace {

using namespace tierrt::alloc;
using Clock = std::chrono::steady_clock;
constexpr std::size_t MiB = 1u << 20;

using tierrt::bench::context;

double modeled_gbps(const char* var) {
  const char* v = std::getenv(var);
  return v != nullptr ? std::atof(v) : 0.0;
}

// The mover's own measure of each copy.
class CopyTimes final : public MoveObserver {
 public:
  void demand_fetch(const Block&) noexcept override {}
  void late_fetch(const Block&, std::uint64_t) noexcept override {}
  void copy_done(Direction d, std::uint64_t bytes, std::uint64_t ns) noexcept override {
    Sum& s = d == Direction::ToHost ? d2h : h2d;
    s.bytes.fetch_add(bytes, std::memory_order_relaxed);
    s.ns.fetch_add(ns, std::memory_order_relaxed);
  }
  struct Sum {
    std::atomic<std::uint64_t> bytes{0}, ns{0};
    double gbps() const {
      const double t = static_cast<double>(ns.load());
      return t > 0 ? static_cast<double>(bytes.load()) / t : 0.0;  // bytes/ns == GB/s
    }
  };
  Sum d2h, h2d;
};

struct Rig {
  std::unique_ptr<Allocator> a;
  CUstream s = nullptr;
  Block* blocks[2] = {};
  CopyTimes times;
  std::string error;

  Rig(SpillMode m, std::size_t n) {
    context();
    Options o;
    o.mode = m;
    a = Allocator::create(o);
    if (!a) {
      error = "allocator";
      return;
    }
    cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    for (Block*& b : blocks) {
      CUdeviceptr p = 0;
      if (a->allocate(&p, n, s) != CUDA_SUCCESS) {
        error = "allocate";
        return;
      }
      // Written once, as a recorded use (as the runtime records it).
      b = a->lookup(p);
      Block* bs[1] = {b};
      if (a->ensure_resident(bs, s) != CUDA_SUCCESS || cuMemsetD8Async(p, 1, n, s) != CUDA_SUCCESS ||
          a->record_use(bs, s) != CUDA_SUCCESS) {
        error = "first use";
        return;
      }
      a->release(bs);
    }
    if (cuStreamSynchronize(s) != CUDA_SUCCESS) error = "first use";
  }
  ~Rig() {
    if (a) {
      a->drain();
      for (Block* b : blocks)
        if (b != nullptr) a->free(b->va, s);
      a.reset();
    }
    if (s != nullptr) cuStreamDestroy(s);
  }

  bool spill(Block* b) {
    if (a->spill(b) != SpillResult::Started) {
      error = "spill refused";
      return false;
    }
    return true;
  }
  bool fetch(Block* b) {
    const CUresult r = a->prefetch(b, s);
    if (r != CUDA_SUCCESS || cuStreamSynchronize(s) != CUDA_SUCCESS) {
      error = std::string("fetch: ") + tierrt::drv::result_name(r);
      return false;
    }
    return true;
  }
};

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// CPU seconds of every thread of the process so far.
double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

void report(benchmark::State& st, const Rig& rig, std::size_t bytes_each_way, double d2h_s, double h2d_s,
            double cpu_s) {
  if (st.iterations() > 0) st.counters["cpu_ms"] = cpu_s * 1e3 / static_cast<double>(st.iterations());
  const double model[2] = {modeled_gbps("SIMDEV_D2H_GBPS"), modeled_gbps("SIMDEV_H2D_GBPS")};
  const double wall[2] = {d2h_s > 0 ? static_cast<double>(bytes_each_way) / d2h_s / 1e9 : 0.0,
                          h2d_s > 0 ? static_cast<double>(bytes_each_way) / h2d_s / 1e9 : 0.0};
  const double copy[2] = {rig.times.d2h.gbps(), rig.times.h2d.gbps()};
  const char* dir[2] = {"d2h", "h2d"};
  for (int i = 0; i < 2; ++i) {
    const std::string d = dir[i];
    st.counters[d + "_GBps"] = wall[i];
    st.counters[d + "_copy_GBps"] = copy[i];
    if (model[i] > 0) {
      st.counters[d + "_modeled_GBps"] = model[i];
      st.counters[d + "_over_modeled"] = wall[i] / model[i];
      st.counters[d + "_copy_over_modeled"] = copy[i] / model[i];
    }
  }
}

// The end of a run that moved a block of `n` bytes each way per iteration:
// the error that stopped it, or its bytes and figures.
void finish(benchmark::State& st, Rig& rig, std::size_t n, double d2h_s, double h2d_s, double cpu_s) {
  rig.a->set_observer(nullptr);
  if (!rig.error.empty()) {
    st.SkipWithError(rig.error.c_str());
    return;
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * 2 * n));
  report(st, rig, st.iterations() * n, d2h_s, h2d_s, cpu_s);
}

// A spill, finalised, then the fetch of the same block.
void BM_MoverOneWay(benchmark::State& st, SpillMode m) {
  const std::size_t n = static_cast<std::size_t>(st.range(0));
  Rig rig(m, n);
  Block* b = rig.blocks[0];
  // One untimed round trip: the host copy's memory, the shadow range.
  if (rig.error.empty() && rig.spill(b)) {
    rig.a->drain();
    if (rig.fetch(b)) rig.a->drain();
  }
  if (!rig.error.empty()) {
    st.SkipWithError(rig.error.c_str());
    return;
  }
  rig.a->set_observer(&rig.times);
  double d2h_s = 0, h2d_s = 0;
  const double cpu0 = process_cpu_s();
  for (auto _ : st) {
    const auto t0 = Clock::now();
    if (!rig.spill(b)) break;
    rig.a->drain();
    const auto t1 = Clock::now();
    if (!rig.fetch(b)) break;
    const auto t2 = Clock::now();
    rig.a->drain();
    d2h_s += secs(t1 - t0);
    h2d_s += secs(t2 - t1);
  }
  finish(st, rig, n, d2h_s, h2d_s, process_cpu_s() - cpu0);
}
BENCHMARK_CAPTURE(BM_MoverOneWay, remap, SpillMode::Remap)->Arg(64 * MiB)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MoverOneWay, copy, SpillMode::Copy)->Arg(64 * MiB)->UseRealTime()->Unit(benchmark::kMillisecond);

// One block spills while the other is fetched; they trade places each
// iteration. Each direction moves one block per iteration, in its wall time.
void BM_MoverBothWays(benchmark::State& st, SpillMode m) {
  const std::size_t n = static_cast<std::size_t>(st.range(0));
  Rig rig(m, n);
  int out = 0;  // the block spilled next; the other is spilled
  // Untimed: the second block spilled, and one exchange.
  if (rig.error.empty() && rig.spill(rig.blocks[1])) {
    rig.a->drain();
    if (rig.spill(rig.blocks[0]) && rig.fetch(rig.blocks[1])) rig.a->drain();
    out = 1;
  }
  if (!rig.error.empty()) {
    st.SkipWithError(rig.error.c_str());
    return;
  }
  rig.a->set_observer(&rig.times);
  double both_s = 0;
  const double cpu0 = process_cpu_s();
  for (auto _ : st) {
    const auto t0 = Clock::now();
    if (!rig.spill(rig.blocks[out]) || !rig.fetch(rig.blocks[1 - out])) break;
    rig.a->drain();
    both_s += secs(Clock::now() - t0);
    out = 1 - out;
  }
  finish(st, rig, n, both_s, both_s, process_cpu_s() - cpu0);
}
BENCHMARK_CAPTURE(BM_MoverBothWays, remap, SpillMode::Remap)->Arg(64 * MiB)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MoverBothWays, copy, SpillMode::Copy)->Arg(64 * MiB)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
