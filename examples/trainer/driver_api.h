// The driver entry points the trainer calls, found the way libcudart finds
// them: dlopen("libcuda.so.1"), then cuGetProcAddress for each one. Nothing
// links the driver at build time, so the same binary runs on NVIDIA's
// driver and on simdev, with or without tierrt preloaded.
#pragma once

#include <cuda.h>

#define TRAINER_DRIVER_FUNCTIONS(X)                                                                        \
  X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)     \
  X(cuGetErrorName) X(cuModuleLoad) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)           \
  X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemGetInfo)                  \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuLaunchKernel) X(cuStreamCreate) X(cuStreamDestroy)         \
  X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize)      \
  X(cuEventDestroy)

namespace trainer {

// Members carry the functions' own names (cuda.h's macros give them their
// versioned spelling, as they do the functions).
struct Driver {
#define TRAINER_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  TRAINER_DRIVER_FUNCTIONS(TRAINER_DRIVER_MEMBER)
#undef TRAINER_DRIVER_MEMBER
};

// Every entry point, or exits with one line naming what is missing.
Driver load_driver();

// "CUDA_ERROR_OUT_OF_MEMORY", or the number when the driver has no name for it.
const char* error_name(const Driver& d, CUresult r);

// Exits with one line naming the call when r is not CUDA_SUCCESS.
void check(const Driver& d, CUresult r, const char* call);

}  // namespace trainer
