// The driver function table: every CUDA driver entry point tierrt calls,
// resolved once from the real libcuda.so.1 with the real dlopen/dlsym (found
// by walking libc's dynamic symbol table, so an interposed dlsym is never
// consulted). Every call goes through TIERRT_CU, which checks the entry,
// counts the call and hands the CUresult back to the caller.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "driver/stream_key.h"

namespace tierrt::drv {

// X(name): `name` is the cuda.h spelling; cuda.h's macros turn it into the
// versioned symbol (cuMemAlloc -> cuMemAlloc_v2), which is what gets resolved.
#define TIERRT_DRIVER_FUNCTIONS(X)                                          \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)     \
  X(cuGetProcAddress)                                                       \
  X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetAttribute)                \
  X(cuDeviceTotalMem)                                                       \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)                  \
  X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxGetDevice)                   \
  X(cuCtxSynchronize) X(cuCtxGetStreamPriorityRange)                        \
  X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuMemGetAddressRange)            \
  X(cuMemGetInfo) X(cuMemAlloc) X(cuMemFree) X(cuMemAllocPitch)             \
  X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemAllocFromPoolAsync)           \
  X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemHostRegister)                   \
  X(cuMemHostUnregister)                                                    \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate)                 \
  X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)               \
  X(cuMemGetAllocationGranularity)                                          \
  X(cuMemRetainAllocationHandle) X(cuMemExportToShareableHandle)            \
  X(cuMemImportFromShareableHandle)                                         \
  X(cuMemcpy) X(cuMemcpyAsync) X(cuMemcpyHtoD) X(cuMemcpyDtoH)              \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoD)                 \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD8Async) X(cuMemsetD32)      \
  X(cuMemsetD32Async)                                                       \
  X(cuStreamCreate) X(cuStreamCreateWithPriority) X(cuStreamDestroy)        \
  X(cuStreamSynchronize) X(cuStreamQuery) X(cuStreamWaitEvent)              \
  X(cuStreamIsCapturing) X(cuStreamBeginCapture) X(cuStreamEndCapture)      \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery)       \
  X(cuEventSynchronize) X(cuEventElapsedTime)                               \
  X(cuStreamGetCaptureInfo) X(cuThreadExchangeStreamCaptureMode)           \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)              \
  X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuLaunchCooperativeKernel)        \
  X(cuFuncGetParamInfo) X(cuKernelGetParamInfo)                             \
  X(cuDeviceGetDefaultMemPool)                                              \
  X(cuPointerGetAttribute) X(cuPointerGetAttributes)                        \
  X(cuGraphLaunch)

#define TIERRT_DRV_STR2_(x) #x
#define TIERRT_DRV_STR_(x) TIERRT_DRV_STR2_(x)

enum class Id : unsigned {
#define TIERRT_DRV_ID_(name) name,
  TIERRT_DRIVER_FUNCTIONS(TIERRT_DRV_ID_)
#undef TIERRT_DRV_ID_
  kCount
};

struct Table {
#define TIERRT_DRV_FIELD_(name) decltype(&::name) name = nullptr;
  TIERRT_DRIVER_FUNCTIONS(TIERRT_DRV_FIELD_)
#undef TIERRT_DRV_FIELD_
  void* handle = nullptr;  // the dlopen handle of libcuda.so.1
  bool loaded = false;     // libcuda.so.1 was found and cuInit resolved
};

// True when libcuda.so.1 was found (the table is resolved on first use,
// thread-safe, once per process).
bool loaded() noexcept;

// Any other symbol of libcuda.so.1 (a _ptsz form, a simdev extension),
// looked up with the real dlsym; null when absent or the driver is missing.
void* resolve(const char* symbol) noexcept;

// Symbol name of a table entry as resolved ("cuMemAlloc_v2").
const char* symbol_name(Id id) noexcept;

// The real dlsym / dlopen of the C library, never an interposed one.
using DlsymFn = void* (*)(void*, const char*);
using DlopenFn = void* (*)(const char*, int);
DlsymFn real_dlsym() noexcept;
DlopenFn real_dlopen() noexcept;

// What dlsym(RTLD_NEXT, name) means to code at `caller`: the first function
// `name` defined by an object loaded after the caller's, in load order (the
// symbol's default version). *found_caller is false when no loaded object
// contains `caller`; null when no later object defines it. Unlike the C
// library's lookup it also sees objects dlopened with RTLD_LOCAL (the
// driver, as most programs load it).
void* next_definition(const void* caller, const char* name, bool* found_caller) noexcept;

// "CUDA_ERROR_OUT_OF_MEMORY"; never calls into the driver for the common codes.
const char* result_name(CUresult r) noexcept;

// Per-function call counters (for tests and stats). Counting is off unless
// enabled; when off a call costs one relaxed load more than a plain call.
void set_counting(bool on) noexcept;
std::uint64_t calls(Id id) noexcept;
std::uint64_t total_calls() noexcept;
void reset_counts() noexcept;

namespace detail {
// The resolved table. Call through TIERRT_CU, never through its fields: that
// keeps the null check and the call counters on every call.
const Table& table() noexcept;

extern std::atomic<bool> g_counting;
extern std::atomic<std::uint64_t> g_counts[static_cast<unsigned>(Id::kCount)];

// Arguments as the driver takes them: a per-thread stream key becomes
// CU_STREAM_PER_THREAD (driver/stream_key.h); the rest passes unchanged.
template <class T>
inline T to_driver(T v) noexcept {
  return v;
}
inline CUstream to_driver(CUstream s) noexcept { return driver_stream(s); }

template <class Fn, class... A>
[[nodiscard]] inline CUresult invoke(Id id, Fn fn, A... a) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) [[unlikely]]
    g_counts[static_cast<unsigned>(id)].fetch_add(1, std::memory_order_relaxed);
  if (fn == nullptr) [[unlikely]]
    return table().loaded ? CUDA_ERROR_NOT_SUPPORTED
                          : CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
  return fn(to_driver(a)...);
}
}  // namespace detail

}  // namespace tierrt::drv

// The one way to call the driver: TIERRT_CU(cuMemCreate, &h, size, &prop, 0)
// -> CUresult, to be checked (NOT_SUPPORTED when the driver lacks it).
#define TIERRT_CU(fn, ...)                                                   \
  ::tierrt::drv::detail::invoke(::tierrt::drv::Id::fn,                       \
                                ::tierrt::drv::detail::table().fn            \
                                __VA_OPT__(, ) __VA_ARGS__)
