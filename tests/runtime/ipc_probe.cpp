// IPC of tierrt's memory end to end, run under LD_PRELOAD=libtierrt.so on
// simdev (ipc_test.sh), with the driver API alone:
//   ipc_probe export       a block exported with cuIpcGetMemHandle is opened
//                          by a second process (this program, forked and
//                          exec'd), which reads what was written and writes
//                          back; under a budget that spills every other
//                          block it never moves
//   ipc_probe retain       cuMemRetainAllocationHandle + export of a tierrt
//                          pointer works and pins the block
//   ipc_probe own          the application's own cuMemCreate'd and imported
//                          memory passes through
//   ipc_probe foreign      a handle of a process without tierrt goes to the
//                          driver
// Each prints "ok: ..." per check, or "FAIL: ..." and exits 1. The helper
// modes ("open", "foreign-export") are the second processes.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tierrt/tierrt.h"

namespace {

constexpr size_t kBlock = 8u << 20;
int failures = 0;

void check(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what);
  std::fflush(stdout);
  if (!ok) ++failures;
}

bool cu(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::printf("FAIL: %s: %s\n", what, name ? name : "?");
  ++failures;
  return false;
}

bool start() {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  return cu(cuInit(0), "cuInit") && cu(cuDeviceGet(&dev, 0), "cuDeviceGet") &&
         cu(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") && cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

// tierrt's API, found in the preloaded library (null without tierrt).
int advise(CUdeviceptr p, tierrt_advice a) {
  auto fn = reinterpret_cast<int (*)(const void*, tierrt_advice)>(dlsym(RTLD_DEFAULT, "tierrt_advise"));
  return fn ? fn(reinterpret_cast<const void*>(p), a) : -2;
}
tierrt_stats stats() {
  tierrt_stats s{};
  s.struct_size = sizeof s;
  auto fn = reinterpret_cast<int (*)(tierrt_stats*)>(dlsym(RTLD_DEFAULT, "tierrt_get_stats"));
  if (fn) fn(&s);
  return s;
}

bool all_bytes(CUdeviceptr p, size_t n, unsigned char v) {
  std::vector<unsigned char> host(n);
  if (!cu(cuMemcpyDtoH(host.data(), p, n), "cuMemcpyDtoH")) return false;
  for (unsigned char b : host)
    if (b != v) return false;
  return true;
}

std::string to_hex(const CUipcMemHandle& h) {
  std::string s;
  char b[3];
  for (unsigned char c : h.reserved) {
    std::snprintf(b, sizeof b, "%02x", c);
    s += b;
  }
  return s;
}
CUipcMemHandle from_hex(const char* s) {
  CUipcMemHandle h{};
  for (size_t i = 0; i < sizeof h.reserved && s[2 * i] && s[2 * i + 1]; ++i) {
    const char two[3] = {s[2 * i], s[2 * i + 1], 0};
    h.reserved[i] = static_cast<char>(std::strtoul(two, nullptr, 16));
  }
  return h;
}

// Runs this program with `args` (the environment as it is: LD_PRELOAD
// included) and returns its exit status.
int run_self(std::vector<std::string> args) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv{const_cast<char*>("/proc/self/exe")};
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// The second process: opens the handle, expects every byte `expect`,
// writes `write`, closes.
int open_mode(const char* hex, unsigned char expect, unsigned char write) {
  if (!start()) return 1;
  const CUipcMemHandle h = from_hex(hex);
  CUdeviceptr p = 0;
  if (!cu(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")) return 1;
  CUdeviceptr again = 0;
  check(cuIpcOpenMemHandle(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS && again == p,
        "the importer: a handle opened twice is the same address");
  check(all_bytes(p, kBlock, expect), "the importer reads what the exporter wrote");
  check(advise(p, TIERRT_ADVISE_SPILL) != 0, "the importer: imported memory is not tiered");
  cu(cuMemsetD8(p, write, kBlock), "cuMemsetD8 (importer)");
  cu(cuCtxSynchronize(), "cuCtxSynchronize (importer)");
  cu(cuIpcCloseMemHandle(again), "cuIpcCloseMemHandle");
  cu(cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle");
  check(cuIpcCloseMemHandle(p) != CUDA_SUCCESS, "the importer: a handle closed as often as opened is gone");
  return failures ? 1 : 0;
}

int export_mode() {
  if (!start()) return 1;
  CUdeviceptr a = 0;
  if (!cu(cuMemAlloc(&a, kBlock), "cuMemAlloc") || !cu(cuMemsetD8(a, 0x11, kBlock), "cuMemsetD8")) return 1;
  unsigned capable = 0;
  cu(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, a), "cuPointerGetAttribute");
  check(capable == 1, "tierrt's memory is legacy-IPC capable");
  CUipcMemHandle h{};
  check(cuIpcGetMemHandle(&h, a + 4096) == CUDA_ERROR_INVALID_VALUE, "a pointer inside an allocation has no handle");
  if (!cu(cuIpcGetMemHandle(&h, a), "cuIpcGetMemHandle")) return 1;
  CUdeviceptr self = 0;
  check(cuIpcOpenMemHandle(&self, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_ERROR_INVALID_CONTEXT,
        "the exporter cannot open its own handle");
  cu(cuCtxSynchronize(), "cuCtxSynchronize");
  check(run_self({"open", to_hex(h), "17", "34"}) == 0, "a second process opened the handle (see its lines)");
  check(all_bytes(a, kBlock, 0x22), "the exporter reads what the importer wrote");

  // Every other block is spilled under the budget (32 MiB: eight blocks of
  // 8 MiB, each written twice); the exported one stays where it is.
  std::vector<CUdeviceptr> others(8);
  for (int round = 0; round < 2; ++round)
    for (size_t i = 0; i < others.size(); ++i) {
      if (round == 0 && !cu(cuMemAlloc(&others[i], kBlock), "cuMemAlloc")) return 1;
      cu(cuMemsetD8(others[i], static_cast<unsigned char>(i), kBlock), "cuMemsetD8");
    }
  cu(cuCtxSynchronize(), "cuCtxSynchronize");
  check(stats().spills > 0, "other blocks were spilled");
  check(advise(a, TIERRT_ADVISE_SPILL) != 0, "the exported block refuses a spill");
  // Its chunk is the one the importer maps: bytes written now reach it.
  cu(cuMemsetD8(a, 0x33, kBlock), "cuMemsetD8");
  cu(cuCtxSynchronize(), "cuCtxSynchronize");
  check(run_self({"open", to_hex(h), "51", "68"}) == 0, "after the pressure the importer sees the block's bytes");
  check(all_bytes(a, kBlock, 0x44), "... and the exporter what it wrote");
  for (CUdeviceptr p : others) cu(cuMemFree(p), "cuMemFree");
  cu(cuMemFree(a), "cuMemFree");
  return failures ? 1 : 0;
}

int retain_mode() {
  if (!start()) return 1;
  CUdeviceptr b = 0;
  if (!cu(cuMemAlloc(&b, kBlock), "cuMemAlloc")) return 1;
  CUmemGenericAllocationHandle h = 0;
  if (!cu(cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(b)), "cuMemRetainAllocationHandle")) return 1;
  CUmemAllocationProp prop{};
  cu(cuMemGetAllocationPropertiesFromHandle(&prop, h), "cuMemGetAllocationPropertiesFromHandle");
  check(prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, "tierrt's chunks are exportable");
  int fd = -1;
  check(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS && fd >= 0,
        "cuMemExportToShareableHandle of a tierrt pointer's handle");
  check(advise(b, TIERRT_ADVISE_SPILL) != 0, "the retained block refuses a spill");
  if (fd >= 0) close(fd);
  cu(cuMemRelease(h), "cuMemRelease");
  cu(cuMemFree(b), "cuMemFree");
  return failures ? 1 : 0;
}

// An allocation tiered per granule group (TIERRT_GRANULE_BYTES, remap
// mode) has a chunk per member, which one handle cannot carry: refused.
int group_mode() {
  if (!start()) return 1;
  CUdeviceptr g = 0;
  cu(cuMemAlloc(&g, 4 * kBlock), "cuMemAlloc (a group)");
  cu(cuMemsetD8(g, 0x21, 4 * kBlock), "cuMemsetD8");
  CUipcMemHandle h{};
  check(cuIpcGetMemHandle(&h, g) == CUDA_ERROR_INVALID_VALUE, "a granule group's IPC handle is refused");
  check(all_bytes(g, 4 * kBlock, 0x21), "... and its bytes are as written");
  cu(cuMemFree(g), "cuMemFree");
  return failures == 0 ? 0 : 1;
}

int own_mode() {
  if (!start()) return 1;
  // Something of tierrt's first, so that its engine runs.
  CUdeviceptr t = 0;
  cu(cuMemAlloc(&t, kBlock), "cuMemAlloc");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  const size_t n = 2u << 20;
  CUmemGenericAllocationHandle h = 0, imported = 0;
  CUdeviceptr va = 0, va2 = 0;
  CUmemAccessDesc acc{};
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (!cu(cuMemCreate(&h, n, &prop, 0), "cuMemCreate") || !cu(cuMemAddressReserve(&va, n, 0, 0, 0), "reserve") ||
      !cu(cuMemMap(va, n, 0, h, 0), "cuMemMap") || !cu(cuMemSetAccess(va, n, &acc, 1), "cuMemSetAccess"))
    return 1;
  cu(cuMemsetD8(va, 0x55, n), "cuMemsetD8 (own memory)");
  check(all_bytes(va, n, 0x55), "the application's own mapping works as without tierrt");
  check(advise(va, TIERRT_ADVISE_SPILL) != 0, "... and is not tiered");
  CUipcMemHandle ih{};
  check(cuIpcGetMemHandle(&ih, va) == CUDA_ERROR_INVALID_VALUE, "... and legacy IPC of it is the driver's refusal");
  int fd = -1;
  cu(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "export");
  if (!cu(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          "import") ||
      !cu(cuMemAddressReserve(&va2, n, 0, 0, 0), "reserve") || !cu(cuMemMap(va2, n, 0, imported, 0), "cuMemMap") ||
      !cu(cuMemSetAccess(va2, n, &acc, 1), "cuMemSetAccess"))
    return 1;
  check(all_bytes(va2, n, 0x55), "imported memory reads the same bytes");
  check(advise(va2, TIERRT_ADVISE_SPILL) != 0, "... and is not tiered");
  close(fd);
  cu(cuMemUnmap(va2, n), "unmap");
  cu(cuMemUnmap(va, n), "unmap");
  cu(cuMemAddressFree(va2, n), "free");
  cu(cuMemAddressFree(va, n), "free");
  cu(cuMemRelease(imported), "release");
  cu(cuMemRelease(h), "release");
  cu(cuMemFree(t), "cuMemFree");
  return failures ? 1 : 0;
}

// A process without tierrt: exports a cuMemAlloc allocation of 0x66, prints
// the handle, waits for a line, expects 0x77 and exits 0 when it is there.
int foreign_export_mode() {
  if (!start()) return 1;
  CUdeviceptr p = 0;
  CUipcMemHandle h{};
  if (!cu(cuMemAlloc(&p, kBlock), "cuMemAlloc") || !cu(cuMemsetD8(p, 0x66, kBlock), "cuMemsetD8") ||
      !cu(cuCtxSynchronize(), "sync") || !cu(cuIpcGetMemHandle(&h, p), "cuIpcGetMemHandle"))
    return 1;
  std::printf("%s\n", to_hex(h).c_str());
  std::fflush(stdout);
  char line[8];
  if (!std::fgets(line, sizeof line, stdin)) return 1;
  return all_bytes(p, kBlock, 0x77) ? 0 : 1;
}

int foreign_mode() {
  if (!start()) return 1;
  CUdeviceptr t = 0;
  cu(cuMemAlloc(&t, kBlock), "cuMemAlloc");  // tierrt's engine runs
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return 1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    unsetenv("LD_PRELOAD");
    execl("/proc/self/exe", "/proc/self/exe", "foreign-export", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  FILE* in = fdopen(from_child[0], "r");
  char hex[200] = {};
  const bool got = in && std::fgets(hex, sizeof hex, in);
  check(got, "the process without tierrt exported a handle");
  CUdeviceptr p = 0;
  if (got && cu(cuIpcOpenMemHandle(&p, from_hex(hex), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")) {
    check(all_bytes(p, kBlock, 0x66), "its memory, opened by the driver, reads as written");
    cu(cuMemsetD8(p, 0x77, kBlock), "cuMemsetD8");
    cu(cuCtxSynchronize(), "sync");
    cu(cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle");
  }
  (void)!write(to_child[1], "go\n", 3);
  int status = 0;
  waitpid(pid, &status, 0);
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the exporter reads what this process wrote");
  cu(cuMemFree(t), "cuMemFree");
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "open" && argc == 5)
    return open_mode(argv[2], static_cast<unsigned char>(std::atoi(argv[3])),
                     static_cast<unsigned char>(std::atoi(argv[4])));
  if (mode == "export") return export_mode();
  if (mode == "retain") return retain_mode();
  if (mode == "own") return own_mode();
  if (mode == "group") return group_mode();
  if (mode == "foreign") return foreign_mode();
  if (mode == "foreign-export") return foreign_export_mode();
  std::fprintf(stderr, "ipc_probe: unknown mode '%s' (export, retain, own, foreign)\n", mode.c_str());
  return 2;
}
