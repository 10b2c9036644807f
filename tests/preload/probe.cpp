// A CUDA program that reaches the driver one of the ways applications do,
// runs under LD_PRELOAD=libtierrt.so, and checks that tierrt saw it:
//   probe PATH [SCENARIO]
// PATH: direct | dlsym | procaddr-11030 | procaddr-12000 | procaddr-13000 |
//       procaddr-ptsz | cudart-like
// SCENARIO: oversubscribe (default) | training | kernel | wide-kernel | pointer-table | layout-unload |
//           capture | capture-before-start | capture-side-stream | torch | fork | exit-in-flight | off
// It allocates three times the device's memory in idle blocks, fills them,
// reads them all back bit for bit, and asks tierrt's own stats (not its log)
// whether its hooks carried the allocations. Exit status 0 means success.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "simdev/simdev.h"
#include "tierrt/tierrt.h"

// cuda.h spells cuGetProcAddress as the _v2 form; CUDA 11.3-era callers use
// the original four-argument function, which the driver still exports.
#undef cuGetProcAddress
extern "C" CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);

namespace {

struct Api {
  decltype(&::cuInit) init;
  decltype(&::cuDeviceGet) device_get;
  decltype(&::cuDevicePrimaryCtxRetain) retain;
  decltype(&::cuCtxSetCurrent) set_current;
  decltype(&::cuCtxSynchronize) sync;
  decltype(&::cuMemGetInfo_v2) mem_info;
  decltype(&::cuMemAlloc_v2) alloc;
  decltype(&::cuMemFree_v2) free;
  decltype(&::cuMemcpyHtoD_v2) htod;
  decltype(&::cuMemcpyDtoH_v2) dtoh;
  decltype(&::cuModuleLoadData) load_module;
  decltype(&::cuModuleGetFunction) get_function;
  decltype(&::cuLaunchKernel) launch;
};

bool g_exiting = false;  // in a static destructor: exit() may not be called again

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "probe: %s\n", why.c_str());
  if (g_exiting) std::_Exit(1);
  std::exit(1);
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) fail(std::string(what) + " failed with CUresult " + std::to_string(r));
}

#define API_FIELDS(X)                                                                                      \
  X(init, "cuInit") X(device_get, "cuDeviceGet") X(retain, "cuDevicePrimaryCtxRetain")                    \
  X(set_current, "cuCtxSetCurrent") X(sync, "cuCtxSynchronize") X(mem_info, "cuMemGetInfo")                \
  X(alloc, "cuMemAlloc") X(free, "cuMemFree") X(htod, "cuMemcpyHtoD") X(dtoh, "cuMemcpyDtoH")              \
  X(load_module, "cuModuleLoadData") X(get_function, "cuModuleGetFunction") X(launch, "cuLaunchKernel")

Api direct() {
  return Api{&::cuInit, &::cuDeviceGet, &::cuDevicePrimaryCtxRetain, &::cuCtxSetCurrent, &::cuCtxSynchronize,
             &::cuMemGetInfo_v2, &::cuMemAlloc_v2, &::cuMemFree_v2, &::cuMemcpyHtoD_v2, &::cuMemcpyDtoH_v2,
             &::cuModuleLoadData, &::cuModuleGetFunction, &::cuLaunchKernel};
}

// The exported name of each base name, as a loader using dlsym spells it.
const char* versioned(const char* base) {
  static const char* const kV2[][2] = {{"cuMemGetInfo", "cuMemGetInfo_v2"}, {"cuMemAlloc", "cuMemAlloc_v2"},
                                       {"cuMemFree", "cuMemFree_v2"},       {"cuMemcpyHtoD", "cuMemcpyHtoD_v2"},
                                       {"cuMemcpyDtoH", "cuMemcpyDtoH_v2"}};
  for (const auto& [name, v2] : kV2)
    if (std::strcmp(name, base) == 0) return v2;
  return base;
}

Api by_dlsym() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) fail(std::string("dlopen libcuda.so.1: ") + dlerror());
  Api a{};
#define LOAD_(field, name)                                                   \
  a.field = reinterpret_cast<decltype(a.field)>(dlsym(h, versioned(name)));  \
  if (!a.field) fail(std::string("dlsym ") + versioned(name));
  API_FIELDS(LOAD_)
#undef LOAD_
  return a;
}

using GetProc2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using GetProc1 = CUresult (*)(const char*, void**, int, cuuint64_t);

Api by_proc_address(int version, cuuint64_t flags, GetProc2 get2, GetProc1 get1) {
  Api a{};
#define LOAD_(field, name)                                                                         \
  {                                                                                                \
    void* fn = nullptr;                                                                            \
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;                               \
    CUresult r = get2 ? get2(name, &fn, version, flags, &st) : get1(name, &fn, version, flags);    \
    if (r != CUDA_SUCCESS || !fn || st != CU_GET_PROC_ADDRESS_SUCCESS)                             \
      fail(std::string("cuGetProcAddress ") + name + " at " + std::to_string(version));            \
    a.field = reinterpret_cast<decltype(a.field)>(fn);                                             \
  }
  API_FIELDS(LOAD_)
#undef LOAD_
  return a;
}

// As libcudart does: take cuGetProcAddress_v2 with dlsym, ask it for
// cuGetProcAddress itself, and resolve everything else through that.
Api cudart_like() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) fail("dlopen libcuda.so.1");
  auto boot = reinterpret_cast<GetProc2>(dlsym(h, "cuGetProcAddress_v2"));
  if (!boot) fail("dlsym cuGetProcAddress_v2");
  void* self = nullptr;
  check(boot("cuGetProcAddress", &self, 13000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr), "cuGetProcAddress(self)");
  if (!self) fail("no cuGetProcAddress from cuGetProcAddress");
  return by_proc_address(13000, CU_GET_PROC_ADDRESS_DEFAULT, reinterpret_cast<GetProc2>(self), nullptr);
}

// Every function as tests/preload/standin_interposer.c finds it with
// dlsym(RTLD_NEXT, ...) from inside itself, preloaded behind libtierrt.so.
Api by_interposer_lookups() {
  auto lookup = reinterpret_cast<void* (*)(const char*)>(dlsym(RTLD_DEFAULT, "standin_lookup"));
  if (!lookup) fail("the stand-in interposer is not loaded");
  Api a{};
#define LOAD_(field, name)                                                          \
  a.field = reinterpret_cast<decltype(a.field)>(lookup(versioned(name)));           \
  if (!a.field) fail(std::string("the interposer's dlsym(RTLD_NEXT) of ") + versioned(name));
  API_FIELDS(LOAD_)
#undef LOAD_
  return a;
}

Api api_for(const std::string& path) {
  if (path == "direct" || path == "through-interposer") return direct();
  if (path == "interposer-lookups") return by_interposer_lookups();
  if (path == "dlsym") return by_dlsym();
  if (path == "procaddr-11030") return by_proc_address(11030, 0, nullptr, &::cuGetProcAddress);
  if (path == "procaddr-12000") return by_proc_address(12000, 0, &::cuGetProcAddress_v2, nullptr);
  if (path == "procaddr-13000") return by_proc_address(13000, 0, &::cuGetProcAddress_v2, nullptr);
  if (path == "procaddr-ptsz")
    return by_proc_address(13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &::cuGetProcAddress_v2, nullptr);
  if (path == "cudart-like") return cudart_like();
  fail("unknown path " + path);
}

// tierrt's stats, looked up at run time: absent when tierrt is not preloaded.
bool tierrt_stats_now(tierrt_stats* s) {
  auto get = reinterpret_cast<int (*)(tierrt_stats*)>(dlsym(RTLD_DEFAULT, "tierrt_get_stats"));
  s->struct_size = sizeof *s;
  return get && get(s) == 0;
}

int tierrt_advise_now(CUdeviceptr p, tierrt_advice a) {
  auto advise = reinterpret_cast<int (*)(const void*, tierrt_advice)>(dlsym(RTLD_DEFAULT, "tierrt_advise"));
  return advise ? advise(reinterpret_cast<const void*>(p), a) : -1;
}

uint32_t pattern(size_t block, size_t i) { return static_cast<uint32_t>(block * 2654435761u + i * 40503u + 7); }

void fill(const Api& a, CUdeviceptr p, size_t bytes, size_t block) {
  std::vector<uint32_t> v(bytes / 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = pattern(block, i);
  check(a.htod(p, v.data(), bytes), "cuMemcpyHtoD");
}

void verify(const Api& a, CUdeviceptr p, size_t bytes, size_t block, uint32_t add) {
  std::vector<uint32_t> v(bytes / 4);
  check(a.dtoh(v.data(), p, bytes), "cuMemcpyDtoH");
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != pattern(block, i) + add) fail("block " + std::to_string(block) + " word " + std::to_string(i) + " changed");
}

void add_one_kernel(const simdev_launch* l) {
  auto* p = *static_cast<uint32_t* const*>(l->params[0]);
  size_t n = *static_cast<const size_t*>(l->params[1]);
  for (size_t i = 0; i < n; ++i) p[i] += 1;
}

void oversubscribe(const Api& a, bool expect_tierrt) {
  size_t free_b = 0, total = 0;
  check(a.mem_info(&free_b, &total), "cuMemGetInfo");
  const size_t block = 32u << 20;
  const size_t n = 3 * total / block;
  std::vector<CUdeviceptr> blocks(n);
  for (size_t i = 0; i < n; ++i) {
    CUresult r = a.alloc(&blocks[i], block);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && !expect_tierrt) {
      std::printf("out of memory after %zu of %zu blocks without tierrt, as expected\n", i, n);
      for (size_t j = 0; j < i; ++j) check(a.free(blocks[j]), "cuMemFree");
      return;
    }
    check(r, "cuMemAlloc");
    fill(a, blocks[i], block, i);
  }
  for (size_t i = 0; i < n; ++i) verify(a, blocks[i], block, i, 0);
  tierrt_stats s{};
  if (!tierrt_stats_now(&s)) fail("tierrt is not running: its hooks never saw this program's allocations");
  if (s.allocations < n) fail("tierrt saw " + std::to_string(s.allocations) + " of " + std::to_string(n) + " allocations");
  if (s.spills == 0 || s.fetches == 0) fail("nothing was spilled and fetched back, yet the blocks exceed the device");
  for (CUdeviceptr p : blocks) check(a.free(p), "cuMemFree");
  std::printf("%zu x %zu MiB on a %zu MiB device: all bytes intact; tierrt spilled %llu, fetched %llu\n", n,
              block >> 20, total >> 20, static_cast<unsigned long long>(s.spills),
              static_cast<unsigned long long>(s.fetches));
}

// A host kernel registered with simdev, found the way a GPU program finds kernels.
CUfunction host_kernel(const Api& a, const simdev_kernel_desc& d) {
  if (simdev_try_register_kernel(&d) != 0) fail("this scenario runs on simdev only");
  CUmodule m;
  CUfunction f;
  check(a.load_module(&m, "simdev host kernels"), "cuModuleLoadData");
  check(a.get_function(&f, m, d.name), "cuModuleGetFunction");
  return f;
}

// add_one(uint32_t* p, size_t n)
CUfunction add_one_function(const Api& a) {
  static const size_t sizes[] = {sizeof(uint32_t*), sizeof(size_t)};
  return host_kernel(a, {"tierrt_probe_add_one", &add_one_kernel, 2, sizes, nullptr, 0});
}

void kernel_on_spilled_block(const Api& a) {
  CUfunction f = add_one_function(a);
  const size_t bytes = 16u << 20;
  CUdeviceptr p;
  check(a.alloc(&p, bytes), "cuMemAlloc");
  fill(a, p, bytes, 1);
  check(a.sync(), "cuCtxSynchronize");
  tierrt_stats s{};
  bool tiered = tierrt_stats_now(&s);
  if (tiered) {
    if (tierrt_advise_now(p, TIERRT_ADVISE_SPILL) != 0) fail("tierrt refused to spill the block");
    for (int i = 0; i < 2000 && tierrt_stats_now(&s) && s.spilled_blocks == 0; ++i) usleep(1000);
    if (s.spilled_blocks == 0) fail("the block never reached SPILLED");
  }
  size_t n = bytes / 4;
  void* params[] = {&p, &n};
  check(a.launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel");
  check(a.sync(), "cuCtxSynchronize after the kernel");
  verify(a, p, bytes, 1, 1);
  check(a.free(p), "cuMemFree");
  std::printf("a kernel on a %s block saw its data\n", tiered ? "spilled" : "plain");
}

// CUDA does not survive fork: a child of a process using the driver gets
// the driver's error from every call, with tierrt as without it (tierrt
// stands aside in the child, and the hooks forward), and neither the child's
// calls nor its exit disturb the parent's blocks, spilled or not.
void fork_child_uses_cuda(const Api& a) {
  CUfunction f = add_one_function(a);
  const size_t bytes = 16u << 20;
  std::vector<CUdeviceptr> blocks(4);
  for (size_t i = 0; i < blocks.size(); ++i) {
    check(a.alloc(&blocks[i], bytes), "cuMemAlloc");
    fill(a, blocks[i], bytes, 10 + i);
  }
  check(a.sync(), "cuCtxSynchronize");
  tierrt_stats s{};
  const bool tiered = tierrt_stats_now(&s);
  if (tiered) {  // two spilled, one of them still moving when the child starts
    for (size_t i = 0; i < 2; ++i) tierrt_advise_now(blocks[i], TIERRT_ADVISE_SPILL);
  }
  const pid_t child = fork();
  if (child < 0) fail("fork");
  if (child == 0) {
    int code = 0;
    CUdeviceptr p = 0;
    uint32_t word = 0;
    size_t n = 1;
    void* params[] = {&blocks[0], &n};
    const CUresult got[] = {a.init(0), a.alloc(&p, 1u << 20), a.dtoh(&word, blocks[0], 4),
                            a.launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), a.free(blocks[1])};
    for (size_t i = 0; i < sizeof got / sizeof got[0]; ++i)
      if (got[i] != CUDA_ERROR_NOT_INITIALIZED) {
        std::fprintf(stderr, "probe: the forked child's call %zu returned %d, not NOT_INITIALIZED\n", i, got[i]);
        code = 2;
      }
    std::exit(code);  // atexit handlers and static destructors run
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("the forked child did not get the driver's answers, or did not exit cleanly");
  for (size_t i = 0; i < blocks.size(); ++i) verify(a, blocks[i], bytes, 10 + i, 0);
  for (CUdeviceptr p : blocks) check(a.free(p), "cuMemFree");
  std::printf("fork: the child's driver calls failed as the driver's do; the parent's %s blocks are intact\n",
              tiered ? "tiered" : "plain");
}

// The application's static destructors run after tierrt's exit handler
// (registered later, at tierrt's start, so run earlier): a destructor that
// still launches on, reads and frees tiered blocks, some spilled, works.
struct UsesCudaAtExit {
  const Api* a = nullptr;
  CUfunction f = nullptr;
  std::vector<CUdeviceptr> blocks;
  static constexpr size_t kBytes = 16u << 20;
  ~UsesCudaAtExit() {
    if (a == nullptr) return;
    g_exiting = true;
    for (size_t i = 0; i < blocks.size(); ++i) {
      size_t n = kBytes / 4;
      void* params[] = {&blocks[i], &n};
      check(a->launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel at exit");
    }
    check(a->sync(), "cuCtxSynchronize at exit");
    for (size_t i = 0; i < blocks.size(); ++i) verify(*a, blocks[i], kBytes, 20 + i, 1);
    for (CUdeviceptr p : blocks) check(a->free(p), "cuMemFree at exit");
    std::printf("static destructor: %zu blocks launched on, read and freed after tierrt's exit handler\n",
                blocks.size());
    std::fflush(stdout);
  }
} g_uses_cuda_at_exit;

void static_destructor_uses_cuda(const Api& a) {
  UsesCudaAtExit& u = g_uses_cuda_at_exit;
  u.f = add_one_function(a);
  u.blocks.resize(4);
  for (size_t i = 0; i < u.blocks.size(); ++i) {
    check(a.alloc(&u.blocks[i], UsesCudaAtExit::kBytes), "cuMemAlloc");
    fill(a, u.blocks[i], UsesCudaAtExit::kBytes, 20 + i);
  }
  check(a.sync(), "cuCtxSynchronize");
  for (size_t i = 0; i < 2; ++i) tierrt_advise_now(u.blocks[i], TIERRT_ADVISE_SPILL);
  u.a = new Api(a);  // left for the destructor
}

// A tiered process replaces itself while spills are under way: the new
// image (LD_PRELOAD is inherited) starts tierrt afresh and oversubscribes.
[[noreturn]] void exec_with_moves_in_flight(const Api& a) {
  std::vector<CUdeviceptr> blocks(6);
  for (size_t i = 0; i < blocks.size(); ++i) {
    check(a.alloc(&blocks[i], 16u << 20), "cuMemAlloc");
    fill(a, blocks[i], 16u << 20, i);
  }
  for (CUdeviceptr p : blocks) tierrt_advise_now(p, TIERRT_ADVISE_SPILL);
  char self[] = "/proc/self/exe", path[] = "direct", scenario[] = "oversubscribe";
  char* argv[] = {self, path, scenario, nullptr};
  execv(self, argv);
  fail(std::string("execv: ") + std::strerror(errno));
}

// A kernel that takes a table of pointers by value, naming more blocks than
// the launch hook keeps on its stack: every one of them, spilled beforehand,
// must be resident when the kernel runs (in copy mode a spilled block's VA is
// unmapped, so a miss is an illegal address).
constexpr size_t kWideBlocks = 300;
struct WideTable {
  CUdeviceptr blocks[kWideBlocks];
};

void add_one_to_every_block_kernel(const simdev_launch* l) {
  const auto* t = static_cast<const WideTable*>(l->params[0]);
  const size_t n = *static_cast<const size_t*>(l->params[1]);
  for (CUdeviceptr b : t->blocks)
    for (size_t i = 0; i < n; ++i) reinterpret_cast<uint32_t*>(b)[i] += 1;
}

void kernel_naming_many_spilled_blocks(const Api& a) {
  static const size_t sizes[] = {sizeof(WideTable), sizeof(size_t)};
  CUfunction f = host_kernel(a, {"tierrt_probe_add_one_wide", &add_one_to_every_block_kernel, 2, sizes, nullptr, 0});
  const size_t bytes = 1u << 20;
  WideTable table{};
  for (size_t i = 0; i < kWideBlocks; ++i) {
    check(a.alloc(&table.blocks[i], bytes), "cuMemAlloc");
    fill(a, table.blocks[i], bytes, i);
  }
  check(a.sync(), "cuCtxSynchronize");
  for (CUdeviceptr p : table.blocks)
    if (tierrt_advise_now(p, TIERRT_ADVISE_SPILL) != 0) fail("tierrt refused to spill a block");
  tierrt_stats s{};
  for (int i = 0; i < 5000 && tierrt_stats_now(&s) && s.spilled_blocks < kWideBlocks; ++i) usleep(1000);
  if (s.spilled_blocks < kWideBlocks) fail("only " + std::to_string(s.spilled_blocks) + " blocks reached SPILLED");
  size_t n = bytes / 4;
  void* params[] = {&table, &n};
  check(a.launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel (wide)");
  check(a.sync(), "cuCtxSynchronize after the wide kernel");
  for (size_t i = 0; i < kWideBlocks; ++i) verify(a, table.blocks[i], bytes, i, 1);
  for (CUdeviceptr p : table.blocks) check(a.free(p), "cuMemFree");
  std::printf("a kernel naming %zu spilled blocks saw every one's data\n", kWideBlocks);
}

// Spills every block and waits until `count` blocks are SPILLED.
void spill_all(const std::vector<CUdeviceptr>& blocks, unsigned long long count) {
  for (CUdeviceptr p : blocks)
    if (tierrt_advise_now(p, TIERRT_ADVISE_SPILL) != 0) fail("tierrt refused to spill a block");
  tierrt_stats s{};
  for (int i = 0; i < 5000 && tierrt_stats_now(&s) && s.spilled_blocks < count; ++i) usleep(1000);
  if (s.spilled_blocks < count) fail("the blocks never reached SPILLED");
}

// add_one_through(const uint64_t* table, size_t count, size_t n): adds one
// to the first n words of every block the table points to.
void add_one_through_table_kernel(const simdev_launch* l) {
  const auto* table = *static_cast<const uint64_t* const*>(l->params[0]);
  const size_t count = *static_cast<const size_t*>(l->params[1]);
  const size_t n = *static_cast<const size_t*>(l->params[2]);
  for (size_t b = 0; b < count; ++b)
    for (size_t i = 0; i < n; ++i) reinterpret_cast<uint32_t*>(table[b])[i] += 1;
}

// A pointer table uploaded with cuMemcpyHtoD: the kernel reaches its blocks
// only through it, so tierrt must fetch them for the launch that names the
// table (in copy mode a spilled block's VA is unmapped).
void kernel_through_pointer_table(const Api& a) {
  static const size_t sizes[] = {sizeof(uint64_t*), sizeof(size_t), sizeof(size_t)};
  CUfunction f = host_kernel(a, {"tierrt_probe_add_one_through", &add_one_through_table_kernel, 3, sizes, nullptr, 0});
  const size_t bytes = 16u << 20;
  std::vector<CUdeviceptr> blocks(2);
  for (size_t i = 0; i < blocks.size(); ++i) {
    check(a.alloc(&blocks[i], bytes), "cuMemAlloc");
    fill(a, blocks[i], bytes, i);
  }
  CUdeviceptr table;
  check(a.alloc(&table, 64), "cuMemAlloc (table)");
  const uint64_t pointers[2] = {blocks[0], blocks[1]};
  check(a.htod(table, pointers, sizeof pointers), "cuMemcpyHtoD (table)");
  check(a.sync(), "cuCtxSynchronize");
  spill_all(blocks, blocks.size());
  size_t count = blocks.size(), n = bytes / 4;
  void* params[] = {&table, &count, &n};
  check(a.launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel (through the table)");
  check(a.sync(), "cuCtxSynchronize after the kernel");
  for (size_t i = 0; i < blocks.size(); ++i) verify(a, blocks[i], bytes, i, 1);
  for (CUdeviceptr p : blocks) check(a.free(p), "cuMemFree");
  check(a.free(table), "cuMemFree (table)");
  std::printf("a kernel reaching spilled blocks through a pointer table saw their data\n");
}

// add_one_last(size_t n, size_t pad, uint32_t* p): add_one with its pointer last.
void add_one_last_kernel(const simdev_launch* l) {
  const size_t n = *static_cast<const size_t*>(l->params[0]);
  auto* p = *static_cast<uint32_t* const*>(l->params[2]);
  for (size_t i = 0; i < n; ++i) p[i] += 1;
}

// After cuModuleUnload a new function may get an old handle (simdev hands
// out one per name): its launch must be scanned by its own layout.
void layout_after_unload(const Api& a) {
  static const size_t first[] = {sizeof(uint32_t*), sizeof(size_t)};
  static const size_t second[] = {sizeof(size_t), sizeof(size_t), sizeof(uint32_t*)};
  simdev_kernel_desc d{"tierrt_probe_relayout", &add_one_kernel, 2, first, nullptr, 0};
  if (simdev_try_register_kernel(&d) != 0) fail("this scenario runs on simdev only");
  CUmodule m;
  CUfunction f, g;
  check(a.load_module(&m, "simdev host kernels"), "cuModuleLoadData");
  check(a.get_function(&f, m, d.name), "cuModuleGetFunction");
  const size_t bytes = 16u << 20;
  CUdeviceptr p;
  check(a.alloc(&p, bytes), "cuMemAlloc");
  fill(a, p, bytes, 5);
  size_t n = bytes / 4, pad = 0;
  void* params[] = {&p, &n};
  check(a.launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel");
  check(cuModuleUnload(m), "cuModuleUnload");
  d = simdev_kernel_desc{"tierrt_probe_relayout", &add_one_last_kernel, 3, second, nullptr, 0};
  if (simdev_try_register_kernel(&d) != 0) fail("re-registering the kernel");
  check(a.load_module(&m, "simdev host kernels"), "cuModuleLoadData");
  check(a.get_function(&g, m, d.name), "cuModuleGetFunction");
  check(a.sync(), "cuCtxSynchronize");
  spill_all({p}, 1);
  void* params2[] = {&n, &pad, &p};
  check(a.launch(g, 1, 1, 1, 1, 1, 1, 0, nullptr, params2, nullptr), "cuLaunchKernel (new layout)");
  check(a.sync(), "cuCtxSynchronize after the kernel");
  verify(a, p, bytes, 5, 2);
  check(a.free(p), "cuMemFree");
  std::printf("a function at %s handle was scanned by its own layout\n", f == g ? "an old" : "a new");
}

// A block a captured graph names may spill between the graph's launches:
// each cuGraphLaunch makes it resident before the graph runs.
void captured_graph_makes_its_block_resident_at_launch(const Api& a) {
  CUfunction f = add_one_function(a);
  const size_t bytes = 8u << 20;
  CUdeviceptr p;
  check(a.alloc(&p, bytes), "cuMemAlloc");
  fill(a, p, bytes, 5);
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  size_t n = bytes / 4;
  void* params[] = {&p, &n};
  check(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  check(a.launch(f, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr), "cuLaunchKernel under capture");
  CUgraph g;
  CUgraphExec exec;
  check(cuStreamEndCapture(s, &g), "cuStreamEndCapture");
  check(cuGraphInstantiate(&exec, g, 0), "cuGraphInstantiate");
  // Press on device memory: everything idle may spill, the captured block too.
  size_t free_b = 0, total = 0;
  check(a.mem_info(&free_b, &total), "cuMemGetInfo");
  std::vector<CUdeviceptr> others(2 * total / (16u << 20));
  for (size_t i = 0; i < others.size(); ++i) {
    check(a.alloc(&others[i], 16u << 20), "cuMemAlloc (pressure)");
    fill(a, others[i], 16u << 20, 100 + i);
  }
  if (tierrt_advise_now(p, TIERRT_ADVISE_SPILL) != 0) fail("a block a graph names stayed pinned between launches");
  check(cuGraphLaunch(exec, s), "cuGraphLaunch");
  check(cuGraphLaunch(exec, s), "cuGraphLaunch");
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  verify(a, p, bytes, 5, 2);
  for (size_t i = 0; i < others.size(); ++i) verify(a, others[i], 16u << 20, 100 + i, 0);
  tierrt_stats st{};
  if (!tierrt_stats_now(&st) || st.spills == 0) fail("the pressure did not make tierrt spill anything");
  check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  check(cuGraphDestroy(g), "cuGraphDestroy");
  std::printf("captured graph replayed twice on its block, spilled before, while %llu others spilled\n",
              static_cast<unsigned long long>(st.spills));
}

// A capture begun before tierrt started (it starts on the first allocation)
// is found when tierrt first meets the capturing stream: the block the
// capture frees is the graph's until the graph runs, never the next
// allocation's.
void capture_begun_before_tierrt(const Api& a) {
  CUstream s;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
  tierrt_stats st{};
  if (tierrt_stats_now(&st)) fail("tierrt started before the first allocation");
  const size_t bytes = 8u << 20;
  CUdeviceptr p, q;
  check(a.alloc(&p, bytes), "cuMemAlloc");
  fill(a, p, bytes, 11);
  check(cuMemFreeAsync(p, s), "cuMemFreeAsync under capture");
  check(a.alloc(&q, bytes), "cuMemAlloc");
  if (q == p) fail("an allocation was given the memory a captured free leaves to its graph");
  fill(a, q, bytes, 12);
  CUgraph g;
  CUgraphExec exec;
  check(cuStreamEndCapture(s, &g), "cuStreamEndCapture");
  check(cuGraphInstantiate(&exec, g, 0), "cuGraphInstantiate");
  check(cuGraphLaunch(exec, s), "cuGraphLaunch");
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  verify(a, q, bytes, 12, 0);
  check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  check(cuGraphDestroy(g), "cuGraphDestroy");
  check(a.free(q), "cuMemFree");
  check(cuStreamDestroy(s), "cuStreamDestroy");
  std::printf("a capture begun before tierrt started kept its freed block from the next allocation\n");
}

// Through the hooks: a side stream joined to a capture by an event captures
// too (a block it frees stays the graph's), and cuMemAllocAsync inside a
// capture is the driver's, not tierrt's.
void capture_side_stream_and_graph_memory(const Api& a) {
  const size_t bytes = 8u << 20;
  CUdeviceptr p, q;
  check(a.alloc(&p, bytes), "cuMemAlloc");
  fill(a, p, bytes, 21);
  CUstream s, side;
  CUevent ev;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  tierrt_stats before{}, after{};
  if (!tierrt_stats_now(&before)) fail("tierrt is not running");
  check(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
  CUdeviceptr graph_memory = 0;
  const CUresult in_graph = cuMemAllocAsync(&graph_memory, bytes, s);
  if (!tierrt_stats_now(&after) || after.allocations != before.allocations)
    fail("an allocation inside a capture became tierrt's");
  if (in_graph == CUDA_SUCCESS) check(cuMemFreeAsync(graph_memory, s), "cuMemFreeAsync of graph memory");
  check(cuEventRecord(ev, s), "cuEventRecord under capture");
  check(cuStreamWaitEvent(side, ev, 0), "cuStreamWaitEvent on the capture's event");
  check(cuMemFreeAsync(p, side), "cuMemFreeAsync on the joined stream");
  check(cuEventRecord(ev, side), "cuEventRecord on the joined stream");
  check(cuStreamWaitEvent(s, ev, 0), "cuStreamWaitEvent joining back");
  check(a.alloc(&q, bytes), "cuMemAlloc");
  if (q == p) fail("an allocation was given the memory a side stream's captured free leaves to its graph");
  fill(a, q, bytes, 22);
  CUgraph g;
  CUgraphExec exec;
  check(cuStreamEndCapture(s, &g), "cuStreamEndCapture");
  check(cuGraphInstantiate(&exec, g, 0), "cuGraphInstantiate");
  check(cuGraphLaunch(exec, s), "cuGraphLaunch");
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  verify(a, q, bytes, 22, 0);
  check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
  check(cuGraphDestroy(g), "cuGraphDestroy");
  check(a.free(q), "cuMemFree");
  check(cuEventDestroy(ev), "cuEventDestroy");
  check(cuStreamDestroy(side), "cuStreamDestroy");
  check(cuStreamDestroy(s), "cuStreamDestroy");
  std::printf("a side stream joined by an event kept its freed block from the next allocation\n");
}

// A training loop: each step writes one activation per layer going forward
// and reads them back in reverse going backward, more than the device budget
// holds. A device-side check flags any activation that does not hold what
// its layer wrote, in every step. With the planner, spills and prefetches
// come from the learned step.
uint32_t act_value(uint32_t step, uint32_t layer, size_t i) { return step * 7919u + layer * 104729u + static_cast<uint32_t>(i); }

void forward_kernel(const simdev_launch* l) {
  auto* out = *static_cast<uint32_t* const*>(l->params[0]);
  size_t n = *static_cast<const size_t*>(l->params[1]);
  uint32_t step = *static_cast<const uint32_t*>(l->params[2]), layer = *static_cast<const uint32_t*>(l->params[3]);
  for (size_t i = 0; i < n; ++i) out[i] = act_value(step, layer, i);
}

void backward_kernel(const simdev_launch* l) {
  auto* act = *static_cast<uint32_t* const*>(l->params[0]);
  size_t n = *static_cast<const size_t*>(l->params[1]);
  uint32_t step = *static_cast<const uint32_t*>(l->params[2]), layer = *static_cast<const uint32_t*>(l->params[3]);
  auto* flag = *static_cast<uint32_t* const*>(l->params[4]);
  for (size_t i = 0; i < n; i += 997)
    if (act[i] != act_value(step, layer, i)) *flag += 1;
}

void training_loop(const Api& a) {
  const size_t fwd_sizes[] = {8, 8, 4, 4};
  const size_t bwd_sizes[] = {8, 8, 4, 4, 8};
  simdev_kernel_desc fwd{"tierrt_probe_forward", &forward_kernel, 4, fwd_sizes, nullptr, 300000};
  simdev_kernel_desc bwd{"tierrt_probe_backward", &backward_kernel, 5, bwd_sizes, nullptr, 300000};
  if (simdev_try_register_kernel(&fwd) != 0 || simdev_try_register_kernel(&bwd) != 0)
    fail("this scenario runs on simdev only");
  CUmodule m;
  CUfunction ff, fb;
  check(a.load_module(&m, "simdev host kernels"), "cuModuleLoadData");
  check(a.get_function(&ff, m, "tierrt_probe_forward"), "cuModuleGetFunction");
  check(a.get_function(&fb, m, "tierrt_probe_backward"), "cuModuleGetFunction");
  auto mark_step = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "tierrt_mark_step"));
  CUdeviceptr flag;
  check(a.alloc(&flag, 4096), "cuMemAlloc (flag)");
  check(cuMemsetD32(flag, 0, 1), "cuMemsetD32");
  const uint32_t layers = 24, steps = 6;
  const size_t bytes = 8u << 20, n = bytes / 4;
  std::vector<CUdeviceptr> act(layers);
  for (uint32_t step = 0; step < steps; ++step) {
    for (uint32_t l = 0; l < layers; ++l) {
      check(a.alloc(&act[l], bytes), "cuMemAlloc (activation)");
      void* params[] = {&act[l], const_cast<size_t*>(&n), &step, &l};
      check(a.launch(ff, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel (forward)");
    }
    for (uint32_t l = layers; l-- > 0;) {
      void* params[] = {&act[l], const_cast<size_t*>(&n), &step, &l, &flag};
      check(a.launch(fb, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel (backward)");
      check(a.free(act[l]), "cuMemFree (activation)");
    }
    if (mark_step) mark_step();
    uint32_t bad = 0;
    check(a.dtoh(&bad, flag, 4), "cuMemcpyDtoH (flag)");
    if (bad) fail("step " + std::to_string(step) + ": " + std::to_string(bad) + " activation words were wrong");
  }
  tierrt_stats st{};
  if (!tierrt_stats_now(&st)) fail("tierrt is not running");
  if (st.spills == 0 || st.fetches == 0) fail("the activations never left the device");
  // Every copy is timed on the device; the rates feed the planner and the stats.
  if (st.d2h_bytes_per_s == 0 || st.h2d_bytes_per_s == 0) fail("the spills and fetches were not measured");
  std::printf("%u steps x %u layers x %zu MiB, every activation intact; spilled %llu, fetched %llu (%llu on demand); "
              "planner started %llu spills, %llu prefetches over %llu steps (%llu mispredictions); %llu prefetches late; "
              "copies %.2f GB/s out, %.2f GB/s in\n",
              steps, layers, bytes >> 20, static_cast<unsigned long long>(st.spills),
              static_cast<unsigned long long>(st.fetches), static_cast<unsigned long long>(st.demand_fetches),
              static_cast<unsigned long long>(st.planned_spills), static_cast<unsigned long long>(st.planned_prefetches),
              static_cast<unsigned long long>(st.steps_learned), static_cast<unsigned long long>(st.mispredictions),
              static_cast<unsigned long long>(st.late_fetches), static_cast<double>(st.d2h_bytes_per_s) / 1e9,
              static_cast<double>(st.h2d_bytes_per_s) / 1e9);
  if (const char* p = std::getenv("TIERRT_POLICY"); p && std::string(p) == "planner" &&
                                                    (st.planned_spills == 0 || st.planned_prefetches == 0))
    fail("the planner never acted on the learned step");
}

// PyTorch's pluggable-allocator entry points, called the way PyTorch calls
// them: a size, a device, and the stream the memory is for.
void torch_entry_points(const Api& a) {
  using Malloc = void* (*)(ssize_t, int, void*);
  using Free = void (*)(void*, ssize_t, int, void*);
  auto tmalloc = reinterpret_cast<Malloc>(dlsym(RTLD_DEFAULT, "tierrt_torch_malloc"));
  auto tfree = reinterpret_cast<Free>(dlsym(RTLD_DEFAULT, "tierrt_torch_free"));
  if (!tmalloc || !tfree) fail("tierrt_torch_malloc/free are not exported");
  CUstream s1, s2;
  check(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  size_t free_b = 0, total = 0;
  check(a.mem_info(&free_b, &total), "cuMemGetInfo");
  const size_t bytes = 16u << 20;
  const size_t n = 2 * total / bytes;  // twice the device, as a model's activations might be
  std::vector<void*> ptrs(n);
  std::vector<uint32_t> host(bytes / 4);
  for (size_t i = 0; i < n; ++i) {
    CUstream s = i % 2 ? s2 : s1;
    ptrs[i] = tmalloc(static_cast<ssize_t>(bytes), 0, s);
    if (!ptrs[i]) fail("tierrt_torch_malloc returned null for block " + std::to_string(i));
    for (size_t w = 0; w < host.size(); ++w) host[w] = pattern(i, w);
    check(cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(ptrs[i]), host.data(), bytes, s), "cuMemcpyHtoDAsync");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
  }
  for (size_t i = 0; i < n; ++i) verify(a, reinterpret_cast<CUdeviceptr>(ptrs[i]), bytes, i, 0);
  // Freed on its stream, then allocated again on that stream: stream order
  // makes the reuse safe without a host synchronisation.
  tfree(ptrs[0], static_cast<ssize_t>(bytes), 0, s1);
  void* again = tmalloc(static_cast<ssize_t>(bytes), 0, s1);
  if (!again) fail("no memory after a free on the same stream");
  check(cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(again), 7u, bytes / 4, s1), "cuMemsetD32Async");
  check(cuStreamSynchronize(s1), "cuStreamSynchronize");
  uint32_t word = 0;
  check(a.dtoh(&word, reinterpret_cast<CUdeviceptr>(again) + bytes - 4, 4), "cuMemcpyDtoH");
  if (word != 7u) fail("the reused block does not hold what was written to it");
  tfree(again, static_cast<ssize_t>(bytes), 0, s1);
  for (size_t i = 1; i < n; ++i) tfree(ptrs[i], static_cast<ssize_t>(bytes), 0, i % 2 ? s2 : s1);
  tierrt_stats st{};
  if (!tierrt_stats_now(&st) || st.allocations < n + 1 || st.spills == 0)
    fail("tierrt did not carry the pluggable allocator's blocks");
  check(cuStreamDestroy(s1), "cuStreamDestroy");
  check(cuStreamDestroy(s2), "cuStreamDestroy");
  std::printf("pluggable allocator: %zu x %zu MiB over two streams on a %zu MiB device, data intact\n", n,
              bytes >> 20, total >> 20);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "direct";
  const std::string scenario = argc > 2 ? argv[2] : "oversubscribe";
  Api a = api_for(path);
  check(a.init(0), "cuInit");
  CUdevice dev;
  CUcontext ctx;
  check(a.device_get(&dev, 0), "cuDeviceGet");
  check(a.retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(a.set_current(ctx), "cuCtxSetCurrent");

  // Scenarios that are one function each; "fork" and "exit-in-flight" below.
  using Scenario = void (*)(const Api&);
  static const std::pair<const char*, Scenario> kScenarios[] = {
      {"oversubscribe", [](const Api& api) { oversubscribe(api, true); }},
      {"off", [](const Api& api) { oversubscribe(api, false); }},
      {"training", training_loop},
      {"capture", captured_graph_makes_its_block_resident_at_launch},
      {"capture-before-start", capture_begun_before_tierrt},
      {"capture-side-stream", capture_side_stream_and_graph_memory},
      {"torch", torch_entry_points},
      {"kernel", kernel_on_spilled_block},
      {"wide-kernel", kernel_naming_many_spilled_blocks},
      {"pointer-table", kernel_through_pointer_table},
      {"layout-unload", layout_after_unload},
      {"static-destructor", static_destructor_uses_cuda},
      {"exec", exec_with_moves_in_flight},
      {"fork-uses-cuda", fork_child_uses_cuda},
  };
  const auto* known = std::find_if(std::begin(kScenarios), std::end(kScenarios),
                                   [&](const auto& s) { return scenario == s.first; });
  if (known != std::end(kScenarios)) {
    known->second(a);
  } else if (scenario == "fork") {
    CUdeviceptr p;
    check(a.alloc(&p, 8u << 20), "cuMemAlloc");
    fill(a, p, 8u << 20, 3);
    pid_t child = fork();
    if (child == 0) {
      // The child allocates and frees host memory and leaves; CUDA is not
      // usable across fork, and tierrt must not get in the way of that.
      std::vector<char> scratch(1 << 20, 'x');
      std::_Exit(scratch[12345] == 'x' ? 0 : 3);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      fail("the forked child did not exit cleanly");
    verify(a, p, 8u << 20, 3, 0);
    check(a.free(p), "cuMemFree");
    std::printf("fork: child exited cleanly, parent's block intact\n");
  } else if (scenario == "exit-in-flight") {
    std::vector<CUdeviceptr> blocks(8);
    for (size_t i = 0; i < blocks.size(); ++i) {
      check(a.alloc(&blocks[i], 32u << 20), "cuMemAlloc");
      fill(a, blocks[i], 32u << 20, i);
    }
    for (CUdeviceptr p : blocks) tierrt_advise_now(p, TIERRT_ADVISE_SPILL);
    std::printf("exiting with spills in flight\n");
    return 0;  // no free, no sync: the process must still exit cleanly
  } else {
    fail("unknown scenario " + scenario);
  }
  if (path == "through-interposer") {
    auto calls = reinterpret_cast<unsigned long (*)()>(dlsym(RTLD_DEFAULT, "standin_calls"));
    if (!calls) fail("the stand-in interposer is not loaded");
    if (calls() == 0) fail("no call went through the stand-in interposer");
    std::printf("%lu calls went through the stand-in interposer, then tierrt\n", calls());
  }
  return 0;
}
