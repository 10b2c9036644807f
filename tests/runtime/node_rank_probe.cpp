// One rank of a node for the node ledger's end-to-end check, run under
// LD_PRELOAD=libtierrt.so on simdev (node_ranks_test.sh):
//   node_rank_probe N [hold]
// writes N blocks of 16 MiB (a distinct byte each), writes them again, reads
// every byte back ("ok" when all are as written, else what differs), and
// with "hold" then prints "holding PID" and waits to be killed, its
// spilled blocks still on the host.
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kBlock = 16u << 20;

bool ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::printf("%s: %s\n", what, name ? name : "?");
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const int n = std::atoi(argv[1]);
  const bool hold = argc > 2 && std::strcmp(argv[2], "hold") == 0;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (!ok(cuInit(0), "cuInit") || !ok(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      !ok(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") || !ok(cuCtxSetCurrent(ctx), "cuCtxSetCurrent"))
    return 1;
  std::vector<CUdeviceptr> blocks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (!ok(cuMemAlloc(&blocks[i], kBlock), "cuMemAlloc")) return 1;
    if (!ok(cuMemsetD8(blocks[i], static_cast<unsigned char>(i + 1), kBlock), "cuMemsetD8")) return 1;
  }
  std::vector<unsigned char> host(kBlock);
  for (int i = 0; i < n; ++i) {
    if (!ok(cuMemcpyDtoH(host.data(), blocks[i], kBlock), "cuMemcpyDtoH")) return 1;
    for (size_t k = 0; k < kBlock; ++k) {
      if (host[k] != static_cast<unsigned char>(i + 1)) {
        std::printf("block %d byte %zu: %d\n", i, k, host[k]);
        return 1;
      }
    }
  }
  // The last blocks read are on the device again: write the first ones
  // after them, so that some are spilled while this rank holds.
  for (int i = 0; i < n; ++i)
    if (!ok(cuMemsetD8(blocks[static_cast<size_t>(n - 1 - i)], 7, kBlock), "cuMemsetD8")) return 1;
  if (!ok(cuCtxSynchronize(), "cuCtxSynchronize")) return 1;
  std::printf("ok\n");
  std::fflush(stdout);
  if (hold) {
    std::printf("holding %d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    pause();
  }
  for (CUdeviceptr p : blocks) (void)cuMemFree(p);
  return 0;
}
