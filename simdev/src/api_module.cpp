// Modules, libraries and kernels: names resolve against the host-kernel
// registry, whatever image was loaded; launches run the host kernel on the
// stream's worker after checking every pointer-sized parameter word.
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "kernel_registry.h"
#include "state.h"
#include "stream.h"

using namespace simdev;

namespace {

struct Module {};
struct Library {};

struct Loaded {
  std::mutex mu;
  std::unordered_set<const void*> modules, libraries;
};

Loaded& loaded() {
  static Loaded* l = new Loaded;
  return *l;
}

template <typename T>
CUresult load(std::unordered_set<const void*> Loaded::*set, const void* image, T** out) {
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
  auto* obj = new T;
  std::lock_guard lock(loaded().mu);
  (loaded().*set).insert(obj);
  *out = obj;
  return CUDA_SUCCESS;
}

template <typename T>
CUresult unload(std::unordered_set<const void*> Loaded::*set, T* obj) {
  {
    std::lock_guard lock(loaded().mu);
    if (!(loaded().*set).erase(obj)) return CUDA_ERROR_INVALID_HANDLE;
  }
  delete obj;
  return CUDA_SUCCESS;
}

bool is_loaded(std::unordered_set<const void*> Loaded::*set, const void* obj) {
  std::lock_guard lock(loaded().mu);
  return (loaded().*set).count(obj) != 0;
}

CUresult get_function(std::unordered_set<const void*> Loaded::*set, const void* owner, const char* name, Function** out) {
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!is_loaded(set, owner)) return CUDA_ERROR_INVALID_HANDLE;
  Function* f = find_function(name);
  if (!f) return CUDA_ERROR_NOT_FOUND;
  *out = f;
  return CUDA_SUCCESS;
}

CUresult param_info(const void* handle, size_t index, size_t* offset, size_t* size) {
  if (!valid_function(handle)) return CUDA_ERROR_INVALID_HANDLE;
  auto info = static_cast<const Function*>(handle)->info();
  if (!info || index >= info->sizes.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset) *offset = info->offsets[index];
  if (size) *size = info->sizes[index];
  return CUDA_SUCCESS;
}

// Runs on the stream's worker.
CUresult run_kernel(const KernelRecord& rec, const KernelInfo& info) {
  auto start = std::chrono::steady_clock::now();
  AddressSpace& m = state().memory;
  // Any 8-byte word may be a pointer (PyTorch passes pointers inside
  // by-value structs): each one into device VA must be backed.
  std::vector<Access> accesses;
  for (size_t off = 0; off + sizeof(uint64_t) <= rec.params.size(); off += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, rec.params.data() + off, sizeof word);
    if (m.in_arena(word)) accesses.push_back({word, 1, false, true});
  }
  uint64_t token = 0;
  if (CUresult e = m.begin_use(accesses.data(), accesses.size(), &token)) return e;
  std::vector<void*> params;
  auto* base = const_cast<unsigned char*>(rec.params.data());
  for (size_t off : info.offsets) params.push_back(base + off);
  simdev_launch launch{};
  std::memcpy(launch.grid, rec.grid, sizeof launch.grid);
  std::memcpy(launch.block, rec.block, sizeof launch.block);
  launch.shared_bytes = rec.shared_bytes;
  launch.num_params = static_cast<unsigned>(params.size());
  launch.params = params.data();
  info.fn(&launch);
  m.end_use(token);
  if (info.modeled_ns) std::this_thread::sleep_until(start + std::chrono::nanoseconds(info.modeled_ns));
  return CUDA_SUCCESS;
}

CUresult pack_params(const KernelInfo& info, void** params, void** extra, std::vector<unsigned char>& out) {
  out.assign(info.buffer_bytes, 0);
  if (params && extra) return CUDA_ERROR_INVALID_VALUE;
  if (params) {
    for (size_t i = 0; i < info.sizes.size(); ++i) {
      if (!params[i]) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(out.data() + info.offsets[i], params[i], info.sizes[i]);
    }
    return CUDA_SUCCESS;
  }
  if (extra) {
    const void* buffer = nullptr;
    size_t bytes = 0;
    bool have_size = false;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) bytes = *static_cast<size_t*>(extra[i + 1]), have_size = true;
      else return CUDA_ERROR_INVALID_VALUE;
    }
    if (!buffer || !have_size || bytes < info.buffer_bytes) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(out.data(), buffer, info.buffer_bytes);
    return CUDA_SUCCESS;
  }
  return info.sizes.empty() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult launch(Context* ctx, CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned shared,
                CUstream h, void** params, void** extra, bool ptsz) {
  if (!valid_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  auto info = reinterpret_cast<const Function*>(f)->info();
  if (!info) return CUDA_ERROR_NOT_FOUND;
  for (int i = 0; i < 3; ++i)
    if (grid[i] == 0 || block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
  if (uint64_t(block[0]) * block[1] * block[2] > 1024 || block[2] > 64 || grid[1] > 65535 || grid[2] > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  if (shared > 232448) return CUDA_ERROR_INVALID_VALUE;
  auto rec = std::make_shared<KernelRecord>();
  rec->function = f;
  std::memcpy(rec->grid, grid, sizeof rec->grid);
  std::memcpy(rec->block, block, sizeof rec->block);
  rec->shared_bytes = shared;
  if (CUresult e = pack_params(*info, params, extra, rec->params)) return e;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  Work w;
  w.kernel = rec;
  w.run = [rec, info] { return run_kernel(*rec, *info); };
  return submit(s, std::move(w));
}

CUresult launch_ex(Context* ctx, const CUlaunchConfig* cfg, CUfunction f, void** params, void** extra, bool ptsz) {
  if (!cfg || (cfg->numAttrs && !cfg->attrs)) return CUDA_ERROR_INVALID_VALUE;
  unsigned grid[3] = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ};
  unsigned block[3] = {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ};
  return launch(ctx, f, grid, block, cfg->sharedMemBytes, cfg->hStream, params, extra, ptsz);
}

}  // namespace

SIMDEV_API CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  SIMDEV_ENTER_CTX("cuModuleLoadData", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  (void)ctx;
  return load<Module>(&Loaded::modules, image, reinterpret_cast<Module**>(module));
}

SIMDEV_API CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*, void**) {
  return cuModuleLoadData(module, image);
}

SIMDEV_API CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  SIMDEV_ENTER_CTX("cuModuleUnload", CUDA_ERROR_INVALID_HANDLE, ctx);
  (void)ctx;
  return unload(&Loaded::modules, reinterpret_cast<Module*>(module));
}

SIMDEV_API CUresult CUDAAPI cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  SIMDEV_ENTER_CTX("cuModuleGetFunction", CUDA_ERROR_NOT_FOUND, ctx);
  (void)ctx;
  return get_function(&Loaded::modules, module, name, reinterpret_cast<Function**>(f));
}

SIMDEV_API CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int,
                                              CUlibraryOption*, void**, unsigned int) {
  SIMDEV_ENTER("cuLibraryLoadData", CUDA_ERROR_OUT_OF_MEMORY);
  return load<Library>(&Loaded::libraries, code, reinterpret_cast<Library**>(library));
}

SIMDEV_API CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  SIMDEV_ENTER("cuLibraryUnload", CUDA_ERROR_INVALID_HANDLE);
  return unload(&Loaded::libraries, reinterpret_cast<Library*>(library));
}

SIMDEV_API CUresult CUDAAPI cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  SIMDEV_ENTER("cuLibraryGetKernel", CUDA_ERROR_NOT_FOUND);
  return get_function(&Loaded::libraries, library, name, reinterpret_cast<Function**>(kernel));
}

SIMDEV_API CUresult CUDAAPI cuKernelGetFunction(CUfunction* f, CUkernel kernel) {
  SIMDEV_ENTER_CTX("cuKernelGetFunction", CUDA_ERROR_INVALID_HANDLE, ctx);
  (void)ctx;
  if (!f) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_function(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  *f = reinterpret_cast<CUfunction>(kernel);  // one object serves both handles
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  SIMDEV_ENTER("cuFuncGetParamInfo", CUDA_ERROR_INVALID_VALUE);
  return param_info(f, index, offset, size);
}

SIMDEV_API CUresult CUDAAPI cuKernelGetParamInfo(CUkernel k, size_t index, size_t* offset, size_t* size) {
  SIMDEV_ENTER("cuKernelGetParamInfo", CUDA_ERROR_INVALID_VALUE);
  return param_info(k, index, offset, size);
}

SIMDEV_API CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction f) {
  SIMDEV_ENTER("cuFuncGetName", CUDA_ERROR_INVALID_VALUE);
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  *name = reinterpret_cast<const Function*>(f)->name.c_str();
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel k) {
  return cuFuncGetName(name, reinterpret_cast<CUfunction>(k));
}

SIMDEV_API CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                           unsigned bz, unsigned shared, CUstream h, void** params, void** extra) {
  SIMDEV_ENTER_CTX("cuLaunchKernel", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, ctx);
  unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return launch(ctx, f, grid, block, shared, h, params, extra, false);
}
SIMDEV_API CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                unsigned by, unsigned bz, unsigned shared, CUstream h, void** params,
                                                void** extra) {
  SIMDEV_ENTER_CTX("cuLaunchKernel", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, ctx);
  unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return launch(ctx, f, grid, block, shared, h, params, extra, true);
}

SIMDEV_API CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                      unsigned by, unsigned bz, unsigned shared, CUstream h,
                                                      void** params) {
  SIMDEV_ENTER_CTX("cuLaunchCooperativeKernel", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, ctx);
  unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return launch(ctx, f, grid, block, shared, h, params, nullptr, false);
}
SIMDEV_API CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                                           unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                                           CUstream h, void** params) {
  SIMDEV_ENTER_CTX("cuLaunchCooperativeKernel", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, ctx);
  unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return launch(ctx, f, grid, block, shared, h, params, nullptr, true);
}

SIMDEV_API CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* cfg, CUfunction f, void** params, void** extra) {
  SIMDEV_ENTER_CTX("cuLaunchKernelEx", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, ctx);
  return launch_ex(ctx, cfg, f, params, extra, false);
}
SIMDEV_API CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* cfg, CUfunction f, void** params, void** extra) {
  SIMDEV_ENTER_CTX("cuLaunchKernelEx", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, ctx);
  return launch_ex(ctx, cfg, f, params, extra, true);
}
