// What a kernel launch costs the calling thread, measured from outside: the
// same program runs once as is and once with LD_PRELOAD=libtierrt.so, and
// the difference is what tierrt adds per launch. Runs on NVIDIA's driver
// (the contract kernels' PTX) and on simdev (their host versions).
//
// Each launch names one of `live` device blocks (fill_u32 on 256 elements),
// so tierrt's lookup works against a realistic number of live blocks. Launches
// go out in batches with a stream synchronize between batches, so that the
// driver's launch queue never fills and blocks the thread.
//
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
constexpr int kBatchesPerRound = 40;
constexpr uint64_t kElements = 256;

[[noreturn]] void fail(const char* what, CUresult r) {
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "launch_overhead: %s failed: %s\n", what, name ? name : "unknown error");
  std::exit(1);
}

size_t live_blocks(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--live") == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  return 2000;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t live = live_blocks(argc, argv);
  const contract::Session* s = nullptr;
  if (CUresult r = contract::session(&s)) fail("session set-up", r);

  // 1 MiB each: above tierrt's default minimum, so every one is a block.
  constexpr size_t kBlockBytes = 1 << 20;
  std::vector<CUdeviceptr> blocks(live);
  for (auto& b : blocks)
    if (CUresult r = cuMemAlloc(&b, kBlockBytes)) fail("cuMemAlloc", r);
  CUstream stream = nullptr;
  if (CUresult r = cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) fail("cuStreamCreate", r);

  auto one_round = [&](size_t& next) {
    std::chrono::nanoseconds launching{0};
    for (int b = 0; b < kBatchesPerRound; ++b) {
      auto l0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kBatch; ++i) {
        if (CUresult r = contract::fill_u32(s->kernels, stream, blocks[next], 7u, kElements))
          fail("cuLaunchKernel", r);
        next = (next + 1) % blocks.size();
      }
      launching += std::chrono::steady_clock::now() - l0;
      if (CUresult r = cuStreamSynchronize(stream)) fail("cuStreamSynchronize", r);
    }
    return static_cast<double>(launching.count()) / (kBatch * kBatchesPerRound);
  };

  size_t next = 0;
  one_round(next);  // warm-up: module load, first-touch of every block
  std::vector<double> ns;
  for (int r = 0; r < kRounds; ++r) ns.push_back(one_round(next));
  std::sort(ns.begin(), ns.end());

  // Every block must hold what the last launch on it wrote.
  std::vector<uint32_t> host(kElements);
  for (auto b : blocks) {
    if (CUresult r = cuMemcpyDtoH(host.data(), b, kElements * sizeof(uint32_t))) fail("cuMemcpyDtoH", r);
    if (std::any_of(host.begin(), host.end(), [](uint32_t v) { return v != 7u; })) {
      std::fprintf(stderr, "launch_overhead: a block lost its bytes\n");
      return 1;
    }
  }
  for (auto b : blocks) cuMemFree(b);
  cuStreamDestroy(stream);
  std::printf("launch_overhead live=%zu ns_per_launch=%.0f min=%.0f\n", live, ns[kRounds / 2], ns[0]);
  return 0;
}
