// What a kernel launch costs the calling thread, measured from outside: the
// same program runs once as is and once with LD_PRELOAD=libtierrt.so, and
// the difference is what tierrt adds per launch (through its real hook, the
// interposed cuLaunchKernel). Runs on NVIDIA's driver (the contract kernels'
// PTX) and on simdev (their host versions).
//
// Each launch names eight of `live` device blocks (add_one_u32x8: eight
// pointer parameters, as a layer's kernel names its weights, activations
// and workspace), the next eight in turn, so that tierrt's lookups work
// against a realistic number of live blocks; --fixed names the same eight
// every time (launch_hook_bench's BM_LaunchHookAdded does). A step is a batch
// of launches, each step the same sequence; after each batch the stream is
// synchronized (the driver's launch queue never fills and blocks the
// thread) and, where tierrt is preloaded, the step is marked
// (tierrt_mark_step, found with dlsym), so that its planner learns the step
// as it would a training job's. Each launch is timed by itself: the median
// is the typical launch, the mean includes the rare costly ones.
//
// At the end every block must hold the number of launches that named it:
// under a small TIERRT_DEVICE_BUDGET the same program checks that blocks
// spilled and fetched back keep every write.
//
// Options: --live N blocks (2000, at least 8), --batches N steps of 500
// launches per round (40), --fixed.
// Prints one line: "launch_overhead live=N names=rotating|fixed
// steps_marked=yes|no median_ns=M mean_ns=A".
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "contract.h"

namespace {

constexpr int kRounds = 7;
constexpr int kBatch = 500;
constexpr uint64_t kWords = contract::kAddOneX8Words;

[[noreturn]] void fail(const char* what, CUresult r) {
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "launch_overhead: %s failed: %s\n", what, name ? name : "unknown error");
  std::exit(1);
}

size_t option(int argc, char** argv, const char* name, size_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  return fallback;
}

bool flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t live = option(argc, argv, "--live", 2000);
  const size_t batches = option(argc, argv, "--batches", 40);
  const bool fixed = flag(argc, argv, "--fixed");
  if (live < 8) {
    std::fprintf(stderr, "launch_overhead: --live must be at least 8 (each launch names eight blocks)\n");
    return 2;
  }
  const contract::Session* s = nullptr;
  if (CUresult r = contract::session(&s)) fail("session set-up", r);
  // Present only under tierrt; a plain driver run marks nothing.
  using MarkStep = void (*)();
  const auto mark_step = reinterpret_cast<MarkStep>(dlsym(RTLD_DEFAULT, "tierrt_mark_step"));

  // 1 MiB each: above tierrt's default minimum, so every one is a block.
  constexpr size_t kBlockBytes = 1 << 20;
  std::vector<CUdeviceptr> blocks(live);
  for (auto& b : blocks)
    if (CUresult r = cuMemAlloc(&b, kBlockBytes)) fail("cuMemAlloc", r);
  CUstream stream = nullptr;
  if (CUresult r = cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) fail("cuStreamCreate", r);

  for (auto b : blocks)
    if (CUresult r = cuMemsetD32Async(b, 0, kWords, stream)) fail("cuMemsetD32Async", r);
  std::vector<uint32_t> launches_on(blocks.size(), 0);

  std::vector<double> each;  // ns of each timed launch
  each.reserve(static_cast<size_t>(kRounds) * batches * kBatch);
  auto one_round = [&](bool timed) {
    for (size_t b = 0; b < batches; ++b) {
      size_t next = 0;  // each step names the same sequence
      for (int i = 0; i < kBatch; ++i) {
        CUdeviceptr p[8];
        for (size_t k = 0; k < 8; ++k) {
          const size_t at = fixed ? k : (next + k) % blocks.size();
          p[k] = blocks[at];
          ++launches_on[at];
        }
        next = (next + 8) % blocks.size();
        const auto t0 = std::chrono::steady_clock::now();
        const CUresult r = contract::add_one_u32x8(s->kernels, stream, p);
        const auto t1 = std::chrono::steady_clock::now();
        if (r != CUDA_SUCCESS) fail("cuLaunchKernel", r);
        if (timed) each.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
      }
      if (CUresult r = cuStreamSynchronize(stream)) fail("cuStreamSynchronize", r);
      if (mark_step != nullptr) mark_step();
    }
  };

  one_round(false);  // warm-up: module load, first touch of every block, the planner's first steps
  for (int r = 0; r < kRounds; ++r) one_round(true);
  const double mean = std::accumulate(each.begin(), each.end(), 0.0) / static_cast<double>(each.size());
  std::nth_element(each.begin(), each.begin() + each.size() / 2, each.end());
  const double median = each[each.size() / 2];

  std::vector<uint32_t> host(kWords);
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (CUresult r = cuMemcpyDtoH(host.data(), blocks[i], kWords * sizeof(uint32_t))) fail("cuMemcpyDtoH", r);
    const uint32_t want = launches_on[i];
    if (std::any_of(host.begin(), host.end(), [want](uint32_t v) { return v != want; })) {
      std::fprintf(stderr, "launch_overhead: block %zu holds %u, want %u\n", i, host[0], want);
      return 1;
    }
  }
  for (auto b : blocks) cuMemFree(b);
  cuStreamDestroy(stream);
  std::printf("launch_overhead live=%zu names=%s steps_marked=%s median_ns=%.0f mean_ns=%.0f\n", live,
              fixed ? "fixed" : "rotating", mark_step != nullptr ? "yes" : "no", median, mean);
  return 0;
}
