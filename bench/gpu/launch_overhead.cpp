// What a kernel launch costs the calling thread, measured from outside: the
// same program runs once as is and once with LD_PRELOAD=libtierrt.so, and
// the difference is what tierrt adds per launch. Runs on NVIDIA's driver
// (the contract kernels' PTX) and on simdev (their host versions).
//
// Each launch names one of `live` device blocks (add_one_u32 on 256
// elements), so tierrt's lookup works against a realistic number of live
// blocks. Launches go out in batches with a stream synchronize between
// batches, so that the driver's launch queue never fills and blocks the
// thread. At the end every block must hold the number of launches that named
// it: under a small TIERRT_DEVICE_BUDGET the same program checks that blocks
// spilled and fetched back keep every write.
//
// Options: --live N blocks (2000), --batches N of 500 launches per round (40).
// Prints one line: "launch_overhead live=N ns_per_launch=MEDIAN min=MIN".
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "contract.h"

namespace {

constexpr int kRounds = 7;
constexpr int kBatch = 500;
constexpr uint64_t kElements = 256;

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

}  // namespace

int main(int argc, char** argv) {
  const size_t live = option(argc, argv, "--live", 2000);
  const size_t batches = option(argc, argv, "--batches", 40);
  const contract::Session* s = nullptr;
  if (CUresult r = contract::session(&s)) fail("session set-up", r);

  // 1 MiB each: above tierrt's default minimum, so every one is a block.
  constexpr size_t kBlockBytes = 1 << 20;
  std::vector<CUdeviceptr> blocks(live);
  for (auto& b : blocks)
    if (CUresult r = cuMemAlloc(&b, kBlockBytes)) fail("cuMemAlloc", r);
  CUstream stream = nullptr;
  if (CUresult r = cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) fail("cuStreamCreate", r);

  for (auto b : blocks)
    if (CUresult r = cuMemsetD32Async(b, 0, kElements, stream)) fail("cuMemsetD32Async", r);
  std::vector<uint32_t> launches_on(blocks.size(), 0);

  auto one_round = [&](size_t& next) {
    std::chrono::nanoseconds launching{0};
    for (size_t b = 0; b < batches; ++b) {
      auto l0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kBatch; ++i) {
        if (CUresult r = contract::add_one_u32(s->kernels, stream, blocks[next], kElements))
          fail("cuLaunchKernel", r);
        ++launches_on[next];
        next = (next + 1) % blocks.size();
      }
      launching += std::chrono::steady_clock::now() - l0;
      if (CUresult r = cuStreamSynchronize(stream)) fail("cuStreamSynchronize", r);
    }
    return static_cast<double>(launching.count()) / (kBatch * batches);
  };

  size_t next = 0;
  one_round(next);  // warm-up: module load, first-touch of every block
  std::vector<double> ns;
  for (int r = 0; r < kRounds; ++r) ns.push_back(one_round(next));
  std::sort(ns.begin(), ns.end());

  std::vector<uint32_t> host(kElements);
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (CUresult r = cuMemcpyDtoH(host.data(), blocks[i], kElements * sizeof(uint32_t))) fail("cuMemcpyDtoH", r);
    const uint32_t want = launches_on[i];
    if (std::any_of(host.begin(), host.end(), [want](uint32_t v) { return v != want; })) {
      std::fprintf(stderr, "launch_overhead: block %zu holds %u, want %u\n", i, host[0], want);
      return 1;
    }
  }
  for (auto b : blocks) cuMemFree(b);
  cuStreamDestroy(stream);
  std::printf("launch_overhead live=%zu ns_per_launch=%.0f min=%.0f\n", live, ns[kRounds / 2], ns[0]);
  return 0;
}
