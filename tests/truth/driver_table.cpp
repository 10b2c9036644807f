#include "driver_table.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace truth {

namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

[[noreturn]] void fail(const char* what, const char* detail) {
  std::fprintf(stderr, "random_program: %s %s\n", what, detail);
  std::exit(1);
}

template <typename Fn>
void resolve(GetProcAddress get, const char* name, Fn* out) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  CUresult r = get(name, &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status);
  if (r != CUDA_SUCCESS || !fn || status != CU_GET_PROC_ADDRESS_SUCCESS) fail("cuGetProcAddress found no", name);
  *out = reinterpret_cast<Fn>(fn);
}

}  // namespace

Driver load_driver_per_thread_default_stream() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) fail("dlopen libcuda.so.1:", dlerror());
  auto get = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get) fail("dlsym", "cuGetProcAddress_v2");
  Driver d{};
  resolve(get, "cuInit", &d.init);
  resolve(get, "cuDeviceGet", &d.device_get);
  resolve(get, "cuDevicePrimaryCtxRetain", &d.primary_ctx_retain);
  resolve(get, "cuCtxSetCurrent", &d.ctx_set_current);
  resolve(get, "cuGetErrorName", &d.error_name);
  resolve(get, "cuModuleLoadData", &d.module_load_data);
  resolve(get, "cuModuleGetFunction", &d.module_get_function);
  resolve(get, "cuMemAlloc", &d.mem_alloc);
  resolve(get, "cuMemAllocAsync", &d.mem_alloc_async);
  resolve(get, "cuMemFree", &d.mem_free);
  resolve(get, "cuMemFreeAsync", &d.mem_free_async);
  resolve(get, "cuMemcpyHtoD", &d.htod);
  resolve(get, "cuMemcpyDtoH", &d.dtoh);
  resolve(get, "cuMemcpyDtoD", &d.dtod);
  resolve(get, "cuMemcpyHtoDAsync", &d.htod_async);
  resolve(get, "cuMemcpyDtoHAsync", &d.dtoh_async);
  resolve(get, "cuMemcpyDtoDAsync", &d.dtod_async);
  resolve(get, "cuMemsetD32", &d.memset_d32);
  resolve(get, "cuMemsetD8", &d.memset_d8);
  resolve(get, "cuMemsetD32Async", &d.memset_d32_async);
  resolve(get, "cuMemsetD8Async", &d.memset_d8_async);
  resolve(get, "cuLaunchKernel", &d.launch_kernel);
  resolve(get, "cuStreamCreate", &d.stream_create);
  resolve(get, "cuStreamDestroy", &d.stream_destroy);
  resolve(get, "cuStreamSynchronize", &d.stream_synchronize);
  resolve(get, "cuStreamWaitEvent", &d.stream_wait_event);
  resolve(get, "cuEventCreate", &d.event_create);
  resolve(get, "cuEventRecord", &d.event_record);
  resolve(get, "cuEventSynchronize", &d.event_synchronize);
  resolve(get, "cuEventDestroy", &d.event_destroy);
  resolve(get, "cuStreamBeginCapture", &d.stream_begin_capture);
  resolve(get, "cuStreamEndCapture", &d.stream_end_capture);
  resolve(get, "cuStreamIsCapturing", &d.stream_is_capturing);
  resolve(get, "cuGraphInstantiateWithFlags", &d.graph_instantiate);
  resolve(get, "cuGraphLaunch", &d.graph_launch);
  resolve(get, "cuGraphExecDestroy", &d.graph_exec_destroy);
  resolve(get, "cuGraphDestroy", &d.graph_destroy);
  return d;
}

const char* error_name(const Driver& d, CUresult r) {
  const char* name = nullptr;
  if (d.error_name(r, &name) == CUDA_SUCCESS && name) return name;
  static thread_local char number[32];
  std::snprintf(number, sizeof number, "CUresult %d", static_cast<int>(r));
  return number;
}

}  // namespace truth
