// A CUDA program for the settings' end-to-end checks, run under
// LD_PRELOAD=libtierrt.so on simdev (settings_process_test.sh):
//   settings_probe meminfo-first        cuMemGetInfo before any allocation: "FREE TOTAL"
//   settings_probe alloc MIB [TIMES]    cuMemAlloc of MIB MiB, TIMES times: "ok" or the error, per try
//   settings_probe fill MIB             16 MiB blocks until one is refused: "COUNT"
//   settings_probe oversubscribe N      N blocks of 16 MiB, each written, then each written again
// It prints its pid first ("pid PID").
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kMiB = 1u << 20;

bool ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::printf("%s: %s\n", what, name ? name : "?");
  return false;
}

int oversubscribe(int n) {
  std::vector<CUdeviceptr> blocks(static_cast<size_t>(n));
  for (CUdeviceptr& p : blocks) {
    if (!ok(cuMemAlloc(&p, 16 * kMiB), "cuMemAlloc")) return 1;
    if (!ok(cuMemsetD8(p, 1, 16 * kMiB), "cuMemsetD8")) return 1;
  }
  for (CUdeviceptr p : blocks)
    if (!ok(cuMemsetD8(p, 2, 16 * kMiB), "cuMemsetD8")) return 1;
  if (!ok(cuCtxSynchronize(), "cuCtxSynchronize")) return 1;
  for (CUdeviceptr p : blocks) (void)cuMemFree(p);
  std::printf("ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::printf("pid %d\n", static_cast<int>(getpid()));
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (!ok(cuInit(0), "cuInit") || !ok(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      !ok(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") || !ok(cuCtxSetCurrent(ctx), "cuCtxSetCurrent"))
    return 1;
  const char* mode = argv[1];
  if (std::strcmp(mode, "meminfo-first") == 0) {
    size_t free_bytes = 0, total = 0;
    if (!ok(cuMemGetInfo(&free_bytes, &total), "cuMemGetInfo")) return 1;
    std::printf("%zu %zu\n", free_bytes, total);
    return 0;
  }
  if (std::strcmp(mode, "alloc") == 0 && argc >= 3) {
    const size_t bytes = std::strtoull(argv[2], nullptr, 10) * kMiB;
    const int times = argc >= 4 ? std::atoi(argv[3]) : 1;
    for (int i = 0; i < times; ++i) {
      CUdeviceptr p = 0;
      if (ok(cuMemAlloc(&p, bytes), "cuMemAlloc")) {
        std::printf("ok\n");
        (void)cuMemFree(p);
      }
    }
    return 0;
  }
  if (std::strcmp(mode, "fill") == 0 && argc >= 3) {
    const size_t bytes = std::strtoull(argv[2], nullptr, 10) * kMiB;
    std::vector<CUdeviceptr> blocks;
    for (;;) {
      CUdeviceptr p = 0;
      if (cuMemAlloc(&p, bytes) != CUDA_SUCCESS || blocks.size() > 4096) break;
      (void)cuMemsetD8(p, 1, bytes);
      blocks.push_back(p);
    }
    std::printf("%zu\n", blocks.size());
    for (CUdeviceptr p : blocks) (void)cuMemFree(p);
    return 0;
  }
  if (std::strcmp(mode, "oversubscribe") == 0 && argc >= 3) return oversubscribe(std::atoi(argv[2]));
  return 2;
}
