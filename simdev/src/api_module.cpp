// Modules, libraries and kernels: names resolve against the host-kernel
// registry, whatever image was loaded; launches run the host kernel on the
// stream's worker. Parameter words are never inspected: a kernel faults only
// when it actually touches device memory that is not mapped.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "code_handles.h"
#include "kernel_fault_guard.h"
#include "kernel_launch.h"
#include "kernel_registry.h"
#include "proc_table.h"
#include "state.h"
#include "stream.h"

using namespace simdev;

// An entry point an older driver (SIMDEV_DRIVER_VERSION) lacks answers as if
// it could not be found, for callers that bound it before the version was
// lowered.
#define SIMDEV_REQUIRE_SYMBOL(symbol) \
  if (newer_than_driver(symbol)) return CUDA_ERROR_NOT_FOUND

namespace {

CUresult param_info(const Function* f, size_t index, size_t* offset, size_t* size) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  auto info = f->info();
  if (!info || index >= info->sizes.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset) *offset = info->offsets[index];
  if (size) *size = info->sizes[index];
  return CUDA_SUCCESS;
}

// Runs on the stream's worker.
CUresult run_kernel(const KernelRecord& rec, const KernelInfo& info) {
  auto start = std::chrono::steady_clock::now();
  std::vector<void*> params;
  auto* base = const_cast<unsigned char*>(rec.params.data());
  for (size_t off : info.offsets) params.push_back(base + off);
  simdev_launch launch{};
  std::memcpy(launch.grid, rec.grid, sizeof launch.grid);
  std::memcpy(launch.block, rec.block, sizeof launch.block);
  launch.shared_bytes = rec.shared_bytes;
  launch.num_params = static_cast<unsigned>(params.size());
  launch.params = params.data();
  uint64_t fault_address = 0;
  const int device = worker_device();
  // With several devices the pages show what this device may access.
  const bool views = state().config.devices > 1;
  if (views) state().memory.enter_device_view(device);
  CUresult e = run_guarded_kernel(info.fn, &launch, &fault_address);
  if (views) state().memory.leave_device_view();
  if (e) {
    if (state().config.report_faults) {
      bool mapped = state().memory.resolve(fault_address).kind == Resolved::kDeviceMapped;
      std::fprintf(stderr, "simdev: kernel %s on device %d faulted at device address 0x%llx (%s)\n",
                   info.name.c_str(), device, static_cast<unsigned long long>(fault_address),
                   mapped ? "mapped, but not accessible from this device" : "nothing mapped there");
    }
    return e;
  }
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
  Work w;
  if (CUresult e = prepare_kernel(f, grid, block, shared, params, extra, &w)) return e;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  // A kernel runs on the current context's device: a stream of another
  // context is refused (CUDA Programming Guide, Multi-Device System, Stream
  // and Event Behavior; the error code is UNCONFIRMED).
  if (s->context() != ctx) return CUDA_ERROR_INVALID_HANDLE;
  return submit(s, std::move(w));
}

CUresult launch_ex(Context* ctx, const CUlaunchConfig* cfg, CUfunction f, void** params, void** extra, bool ptsz) {
  if (!cfg || (cfg->numAttrs && !cfg->attrs)) return CUDA_ERROR_INVALID_VALUE;
  unsigned grid[3] = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ};
  unsigned block[3] = {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ};
  return launch(ctx, f, grid, block, cfg->sharedMemBytes, cfg->hStream, params, extra, ptsz);
}

}  // namespace

CUresult simdev::prepare_kernel(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned shared,
                                void** params, void** extra, Work* out) {
  const Function* fn = launchable_function(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  auto info = fn->info();
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
  out->kernel = rec;
  out->run = [rec, info] { return run_kernel(*rec, *info); };
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  SIMDEV_ENTER_CTX("cuModuleLoadData", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  (void)ctx;
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  return load_module(module);
}

SIMDEV_API CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*, void**) {
  return cuModuleLoadData(module, image);
}

SIMDEV_API CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  SIMDEV_ENTER_CTX("cuModuleUnload", CUDA_ERROR_INVALID_HANDLE, ctx);
  (void)ctx;
  return unload_module(module);
}

SIMDEV_API CUresult CUDAAPI cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  SIMDEV_ENTER_CTX("cuModuleGetFunction", CUDA_ERROR_NOT_FOUND, ctx);
  (void)ctx;
  if (!f || !name) return CUDA_ERROR_INVALID_VALUE;
  return module_function(module, name, f);
}

SIMDEV_API CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int,
                                              CUlibraryOption*, void**, unsigned int) {
  SIMDEV_ENTER("cuLibraryLoadData", CUDA_ERROR_OUT_OF_MEMORY);
  SIMDEV_REQUIRE_SYMBOL("cuLibraryLoadData");
  if (!library || !code) return CUDA_ERROR_INVALID_VALUE;
  return load_library(library);
}

SIMDEV_API CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  SIMDEV_ENTER("cuLibraryUnload", CUDA_ERROR_INVALID_HANDLE);
  SIMDEV_REQUIRE_SYMBOL("cuLibraryUnload");
  return unload_library(library);
}

SIMDEV_API CUresult CUDAAPI cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  SIMDEV_ENTER("cuLibraryGetKernel", CUDA_ERROR_NOT_FOUND);
  SIMDEV_REQUIRE_SYMBOL("cuLibraryGetKernel");
  if (!kernel || !name) return CUDA_ERROR_INVALID_VALUE;
  return library_kernel(library, name, kernel);
}

SIMDEV_API CUresult CUDAAPI cuKernelGetFunction(CUfunction* f, CUkernel kernel) {
  SIMDEV_ENTER_CTX("cuKernelGetFunction", CUDA_ERROR_INVALID_HANDLE, ctx);
  SIMDEV_REQUIRE_SYMBOL("cuKernelGetFunction");
  if (!f) return CUDA_ERROR_INVALID_VALUE;
  return kernel_function(kernel, ctx, f);
}

SIMDEV_API CUresult CUDAAPI cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  SIMDEV_ENTER("cuFuncGetParamInfo", CUDA_ERROR_INVALID_VALUE);
  SIMDEV_REQUIRE_SYMBOL("cuFuncGetParamInfo");
  return param_info(function_of(f), index, offset, size);
}

SIMDEV_API CUresult CUDAAPI cuKernelGetParamInfo(CUkernel k, size_t index, size_t* offset, size_t* size) {
  SIMDEV_ENTER("cuKernelGetParamInfo", CUDA_ERROR_INVALID_VALUE);
  SIMDEV_REQUIRE_SYMBOL("cuKernelGetParamInfo");
  return param_info(function_of_kernel(k), index, offset, size);
}

SIMDEV_API CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction f) {
  SIMDEV_ENTER("cuFuncGetName", CUDA_ERROR_INVALID_VALUE);
  SIMDEV_REQUIRE_SYMBOL("cuFuncGetName");
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  const Function* fn = function_of(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  *name = fn->name.c_str();
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel k) {
  SIMDEV_ENTER("cuKernelGetName", CUDA_ERROR_INVALID_VALUE);
  SIMDEV_REQUIRE_SYMBOL("cuKernelGetName");
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  const Function* fn = function_of_kernel(k);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  *name = fn->name.c_str();
  return CUDA_SUCCESS;
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
  SIMDEV_REQUIRE_SYMBOL("cuLaunchKernelEx");
  return launch_ex(ctx, cfg, f, params, extra, false);
}
SIMDEV_API CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* cfg, CUfunction f, void** params, void** extra) {
  SIMDEV_ENTER_CTX("cuLaunchKernelEx", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, ctx);
  SIMDEV_REQUIRE_SYMBOL("cuLaunchKernelEx");
  return launch_ex(ctx, cfg, f, params, extra, true);
}
