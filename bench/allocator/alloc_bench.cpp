// Allocator microbenchmarks on simdev (suite 'allocator'):
// - steady-state allocate + free through the cache, against raw
//   cuMemAlloc / cuMemFree (what a job does without tierrt);
// - pointer lookup at 1e2 .. 1e5 live blocks;
// - the launch protocol (ensure_resident, record_use, release) on resident
//   blocks, the allocator's share of every launch;
// - spill + fetch round trips in both modes against a plain pinned
//   cuMemcpy D2H + H2D, at the link bandwidth simdev models;
// - pinned staging from the private jemalloc arena against one
//   cuMemHostAlloc per buffer.
#include <benchmark/benchmark.h>
#include <cuda.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "allocator/allocator.h"
#include "allocator/granule_table.h"
#include "allocator/host_tier.h"
#include "bench/allocator/bench_context.h"
#include "driver/driver.h"

namespace {

using namespace tierrt::alloc;
constexpr std::size_t MiB = 1u << 20;

using tierrt::bench::context;

std::unique_ptr<Allocator> make(SpillMode m, std::uint64_t min_bytes = 1 * MiB) {
  context();
  Options o;
  o.mode = m;
  o.min_bytes = min_bytes;
  return Allocator::create(o);
}

// ---- allocation ----

void BM_TierrtAllocFree(benchmark::State& st) {
  auto a = make(SpillMode::Remap);
  const std::size_t n = static_cast<std::size_t>(st.range(0));
  CUdeviceptr p = 0;
  a->allocate(&p, n, nullptr);  // warm the cache
  a->free(p, nullptr);
  tierrt::drv::reset_counts();
  tierrt::drv::set_counting(true);
  for (auto _ : st) {
    a->allocate(&p, n, nullptr);
    benchmark::DoNotOptimize(p);
    a->free(p, nullptr);
  }
  tierrt::drv::set_counting(false);
  st.counters["driver_calls_per_pair"] =
      static_cast<double>(tierrt::drv::total_calls()) / static_cast<double>(st.iterations());
}
BENCHMARK(BM_TierrtAllocFree)->Arg(4096)->Arg(4 * MiB)->Arg(64 * MiB);

void BM_RawCuMemAllocFree(benchmark::State& st) {
  context();
  const std::size_t n = static_cast<std::size_t>(st.range(0));
  CUdeviceptr p = 0;
  for (auto _ : st) {
    cuMemAlloc(&p, n);
    benchmark::DoNotOptimize(p);
    cuMemFree(p);
  }
}
BENCHMARK(BM_RawCuMemAllocFree)->Arg(4096)->Arg(4 * MiB)->Arg(64 * MiB);

// A training step's allocations: the share that reaches the driver.
void BM_TierrtStepSteadyState(benchmark::State& st) {
  auto a = make(SpillMode::Remap);
  const std::size_t sizes[] = {MiB, 5 * MiB, 64 * MiB, 3 * MiB + 5, 700, 4096, 200000, 12 * MiB};
  std::vector<CUdeviceptr> ps;
  for (auto _ : st) {
    ps.clear();
    for (std::size_t n : sizes) {
      CUdeviceptr p = 0;
      a->allocate(&p, n, nullptr);
      ps.push_back(p);
    }
    for (auto it = ps.rbegin(); it != ps.rend(); ++it) a->free(*it, nullptr);
  }
  const Stats s = a->stats();
  st.counters["allocs_reaching_driver_pct"] =
      100.0 * static_cast<double>(s.driver_allocs) / static_cast<double>(s.allocs);
  st.SetItemsProcessed(st.iterations() * static_cast<long>(std::size(sizes)));
}
BENCHMARK(BM_TierrtStepSteadyState);

// ---- lookup ----

void BM_GranuleTableLookup(benchmark::State& st) {
  const std::size_t live = static_cast<std::size_t>(st.range(0));
  GranuleTable t(21);
  std::mt19937_64 rng(1);
  std::vector<std::uintptr_t> ptrs;
  const std::uintptr_t base = std::uintptr_t{0x7e00} << 32;
  for (std::size_t i = 0; i < live; ++i) {
    const std::uintptr_t va = base + i * (3u << 21);  // gaps between blocks
    t.insert(va, 2u << 21, 0x1000 + i * 8);
    ptrs.push_back(va + rng() % (4u << 20));           // interior pointers
  }
  std::shuffle(ptrs.begin(), ptrs.end(), rng);
  std::size_t i = 0;
  for (auto _ : st) {
    benchmark::DoNotOptimize(t.find(ptrs[i]));
    if (++i == ptrs.size()) i = 0;
  }
}
BENCHMARK(BM_GranuleTableLookup)->Arg(100)->Arg(1000)->Arg(10000)->Arg(100000);

void BM_AllocatorLookup(benchmark::State& st) {
  auto a = make(SpillMode::Remap, 4096);
  const std::size_t live = static_cast<std::size_t>(st.range(0));
  std::vector<CUdeviceptr> ptrs, blocks;
  std::mt19937_64 rng(2);
  for (std::size_t i = 0; i < live; ++i) {
    CUdeviceptr p = 0;
    if (a->allocate(&p, 64 * 1024, nullptr) != CUDA_SUCCESS) {
      st.SkipWithError("allocation failed");
      return;
    }
    blocks.push_back(p);
    ptrs.push_back(p + rng() % (64 * 1024));
  }
  std::shuffle(ptrs.begin(), ptrs.end(), rng);
  std::size_t i = 0;
  for (auto _ : st) {
    benchmark::DoNotOptimize(a->lookup(ptrs[i]));
    if (++i == ptrs.size()) i = 0;
  }
  for (CUdeviceptr p : blocks) a->free(p, nullptr);
}
BENCHMARK(BM_AllocatorLookup)->Arg(100)->Arg(1000)->Arg(4000);

// ---- launch protocol ----

void BM_LaunchProtocol(benchmark::State& st) {
  auto a = make(SpillMode::Remap);
  CUstream s;
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  std::vector<Block*> blocks;
  for (long i = 0; i < st.range(0); ++i) {
    CUdeviceptr p = 0;
    if (a->allocate(&p, 2 * MiB, s) != CUDA_SUCCESS) {
      st.SkipWithError("allocation failed");
      return;
    }
    blocks.push_back(a->lookup(p));
  }
  for (auto _ : st) {
    if (a->ensure_resident(blocks, s) != CUDA_SUCCESS || a->record_use(blocks, s) != CUDA_SUCCESS) {
      st.SkipWithError("launch protocol failed");
      break;
    }
    a->release(blocks);
  }
  cuStreamSynchronize(s);
  for (Block* b : blocks) a->free(b->va, s);
  cuStreamDestroy(s);
}
BENCHMARK(BM_LaunchProtocol)->Arg(1)->Arg(4)->Arg(16);

// ---- spill + fetch ----

void BM_SpillFetch(benchmark::State& st, SpillMode m) {
  auto a = make(m);
  const std::size_t n = static_cast<std::size_t>(st.range(0));
  CUstream s;
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  CUdeviceptr p = 0;
  if (a->allocate(&p, n, s) != CUDA_SUCCESS) {
    st.SkipWithError("setup failed");
    return;
  }
  // Every access is a recorded use (as the runtime records it).
  Block* b = a->lookup(p);
  Block* bs[1] = {b};
  if (a->ensure_resident(bs, s) != CUDA_SUCCESS || cuMemsetD8Async(p, 1, n, s) != CUDA_SUCCESS ||
      a->record_use(bs, s) != CUDA_SUCCESS) {
    st.SkipWithError("setup failed");
    return;
  }
  a->release(bs);
  for (auto _ : st) {
    if (a->spill(b) != SpillResult::Started) {
      st.SkipWithError("spill refused");
      break;
    }
    a->drain();
    CUresult r = a->prefetch(b, s);
    if (r == CUDA_SUCCESS) r = cuStreamSynchronize(s);
    if (r != CUDA_SUCCESS) {
      st.SkipWithError(tierrt::drv::result_name(r));
      break;
    }
    a->drain();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * 2 * n));
  a->free(p, s);
  cuStreamDestroy(s);
}
BENCHMARK_CAPTURE(BM_SpillFetch, remap, SpillMode::Remap)->Arg(64 * MiB)->Arg(256 * MiB)->UseRealTime();
BENCHMARK_CAPTURE(BM_SpillFetch, copy, SpillMode::Copy)->Arg(64 * MiB)->Arg(256 * MiB)->UseRealTime();

void BM_PlainCopyD2HH2D(benchmark::State& st) {
  context();
  const std::size_t n = static_cast<std::size_t>(st.range(0));
  CUstream s;
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  CUdeviceptr d = 0;
  void* h = nullptr;
  if (cuMemAlloc(&d, n) != CUDA_SUCCESS || cuMemsetD8(d, 1, n) != CUDA_SUCCESS ||
      cuMemHostAlloc(&h, n, 0) != CUDA_SUCCESS) {
    st.SkipWithError("setup failed");
    return;
  }
  for (auto _ : st) {
    if (cuMemcpyDtoHAsync(h, d, n, s) != CUDA_SUCCESS || cuMemcpyHtoDAsync(d, h, n, s) != CUDA_SUCCESS ||
        cuStreamSynchronize(s) != CUDA_SUCCESS) {
      st.SkipWithError("copy failed");
      break;
    }
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * 2 * n));
  cuMemFreeHost(h);
  cuMemFree(d);
  cuStreamDestroy(s);
}
BENCHMARK(BM_PlainCopyD2HH2D)->Arg(64 * MiB)->Arg(256 * MiB)->UseRealTime();

// ---- pinned staging ----

void BM_PinnedFromJemallocArena(benchmark::State& st) {
  context();
  HostTier h;
  h.configure_pool(256 * MiB, 4096 * MiB);
  const std::size_t n = static_cast<std::size_t>(st.range(0));
  h.free_pinned(h.alloc_pinned(n));  // the first chunk
  for (auto _ : st) {
    void* p = h.alloc_pinned(n);
    benchmark::DoNotOptimize(p);
    h.free_pinned(p);
  }
  h.shutdown();
}
BENCHMARK(BM_PinnedFromJemallocArena)->Arg(1 * MiB)->Arg(16 * MiB);

void BM_PinnedCuMemHostAllocPerBuffer(benchmark::State& st) {
  context();
  const std::size_t n = static_cast<std::size_t>(st.range(0));
  for (auto _ : st) {
    void* p = nullptr;
    cuMemHostAlloc(&p, n, CU_MEMHOSTALLOC_PORTABLE);
    benchmark::DoNotOptimize(p);
    cuMemFreeHost(p);
  }
}
BENCHMARK(BM_PinnedCuMemHostAllocPerBuffer)->Arg(1 * MiB)->Arg(16 * MiB);

}  // namespace

BENCHMARK_MAIN();
