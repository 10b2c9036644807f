// The driver entry points the random program calls, resolved the way
// libcudart resolves them for per-thread default-stream builds: dlopen
// libcuda.so.1, take cuGetProcAddress_v2, and ask for every function with
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. The NULL stream then means
// the calling thread's own default stream in every call below.
#pragma once

#include <cuda.h>

namespace truth {

struct Driver {
  decltype(&::cuInit) init;
  decltype(&::cuDeviceGet) device_get;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain;
  decltype(&::cuCtxSetCurrent) ctx_set_current;
  decltype(&::cuGetErrorName) error_name;
  decltype(&::cuModuleLoadData) module_load_data;
  decltype(&::cuModuleGetFunction) module_get_function;
  decltype(&::cuMemAlloc) mem_alloc;
  decltype(&::cuMemAllocAsync) mem_alloc_async;
  decltype(&::cuMemFree) mem_free;
  decltype(&::cuMemFreeAsync) mem_free_async;
  decltype(&::cuMemcpyHtoD) htod;
  decltype(&::cuMemcpyDtoH) dtoh;
  decltype(&::cuMemcpyDtoD) dtod;
  decltype(&::cuMemcpyHtoDAsync) htod_async;
  decltype(&::cuMemcpyDtoHAsync) dtoh_async;
  decltype(&::cuMemcpyDtoDAsync) dtod_async;
  decltype(&::cuMemsetD32) memset_d32;
  decltype(&::cuMemsetD8) memset_d8;
  decltype(&::cuMemsetD32Async) memset_d32_async;
  decltype(&::cuMemsetD8Async) memset_d8_async;
  decltype(&::cuLaunchKernel) launch_kernel;
  decltype(&::cuStreamCreate) stream_create;
  decltype(&::cuStreamDestroy) stream_destroy;
  decltype(&::cuStreamSynchronize) stream_synchronize;
  decltype(&::cuStreamWaitEvent) stream_wait_event;
  decltype(&::cuEventCreate) event_create;
  decltype(&::cuEventRecord) event_record;
  decltype(&::cuEventSynchronize) event_synchronize;
  decltype(&::cuEventDestroy) event_destroy;
  decltype(&::cuStreamBeginCapture) stream_begin_capture;
  decltype(&::cuStreamEndCapture) stream_end_capture;
  decltype(&::cuStreamIsCapturing) stream_is_capturing;
  decltype(&::cuGraphInstantiateWithFlags) graph_instantiate;
  decltype(&::cuGraphLaunch) graph_launch;
  decltype(&::cuGraphExecDestroy) graph_exec_destroy;
  decltype(&::cuGraphDestroy) graph_destroy;
};

// Every entry point, or exits with one line naming the one that is missing.
Driver load_driver_per_thread_default_stream();

// "CUDA_ERROR_OUT_OF_MEMORY", or the number when the driver has no name for it.
const char* error_name(const Driver& d, CUresult r);

}  // namespace truth
