#include "allowed_errors.h"

#include <algorithm>
#include <iterator>
#include <vector>

namespace truth {

namespace {

struct Documented {
  Call call;
  const char* name;
  std::vector<CUresult> errors;
};

// From the \return lists of cuda.h (CUDA 13.0) for each function.
const Documented kTable[] = {
    {Call::kMemAlloc, "cuMemAlloc", {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY}},
    {Call::kMemAllocAsync, "cuMemAllocAsync",
     {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_OUT_OF_MEMORY}},
    {Call::kMemFree, "cuMemFree", {CUDA_ERROR_INVALID_VALUE}},
    {Call::kMemFreeAsync, "cuMemFreeAsync", {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED}},
    {Call::kCopy, "cuMemcpy (sync)", {CUDA_ERROR_INVALID_VALUE}},
    {Call::kCopyAsync, "cuMemcpy (async)", {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE}},
    {Call::kMemset, "cuMemset (sync)", {CUDA_ERROR_INVALID_VALUE}},
    {Call::kMemsetAsync, "cuMemset (async)", {CUDA_ERROR_INVALID_VALUE}},
    {Call::kLaunchKernel, "cuLaunchKernel", {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES}},
    {Call::kStreamSynchronize, "cuStreamSynchronize", {CUDA_ERROR_INVALID_HANDLE}},
    {Call::kStreamWaitEvent, "cuStreamWaitEvent", {CUDA_ERROR_INVALID_HANDLE}},
    {Call::kEventCreate, "cuEventCreate", {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY}},
    {Call::kEventRecord, "cuEventRecord", {CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE}},
    {Call::kEventSynchronize, "cuEventSynchronize", {CUDA_ERROR_INVALID_HANDLE}},
    {Call::kBeginCapture, "cuStreamBeginCapture", {CUDA_ERROR_INVALID_VALUE}},
    // An error inside the capture invalidates it (CUresult 901, documented
    // with the capture errors); End then reports it.
    {Call::kEndCapture, "cuStreamEndCapture", {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED}},
    // OUT_OF_MEMORY is not in cuda.h's list, but instantiation allocates
    // device resources and the runtime documents cudaErrorMemoryAllocation
    // for cudaGraphInstantiate.
    {Call::kGraphInstantiate, "cuGraphInstantiate", {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY}},
    {Call::kGraphLaunch, "cuGraphLaunch", {CUDA_ERROR_INVALID_VALUE}},
};

const Documented& entry(Call c) {
  return *std::find_if(std::begin(kTable), std::end(kTable), [c](const Documented& d) { return d.call == c; });
}

}  // namespace

const char* call_name(Call c) { return entry(c).name; }

bool driver_documents(Call c, CUresult r) {
  const auto& errors = entry(c).errors;
  return std::find(errors.begin(), errors.end(), r) != errors.end();
}

const char* const kFaultTargets[] = {
    "cuMemAlloc_v2",        "cuMemAllocAsync",      "cuMemFree_v2",         "cuMemFreeAsync",
    "cuMemcpyHtoD_v2",      "cuMemcpyDtoH_v2",      "cuMemcpyDtoD_v2",      "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2", "cuMemcpyAsync",        "cuMemsetD32_v2",
    "cuMemsetD32Async",     "cuMemsetD8_v2",        "cuMemsetD8Async",      "cuLaunchKernel",
    "cuEventRecord",        "cuEventCreate",        "cuEventSynchronize",   "cuEventQuery",
    "cuStreamWaitEvent",    "cuStreamSynchronize",  "cuMemMap",             "cuMemUnmap",
    "cuMemCreate",          "cuMemSetAccess",       "cuMemRelease",         "cuMemAddressReserve",
    "cuGraphLaunch",        "cuGraphInstantiateWithFlags", "cuStreamBeginCapture_v2", "cuStreamEndCapture",
};
const unsigned kFaultTargetCount = sizeof kFaultTargets / sizeof kFaultTargets[0];

}  // namespace truth
