// cuGetErrorName / cuGetErrorString. Names come from the header itself
// (error_names.inc, generated), descriptions for the common errors are ours
// and the rest are spelled out from the name.
#include <cctype>
#include <map>
#include <mutex>
#include <string>

#include "common.h"

namespace {

struct ErrorName {
  CUresult code;
  const char* name;
};

constexpr ErrorName kNames[] = {
#define SIMDEV_ERROR(e) {e, #e},
#include "error_names.inc"
#undef SIMDEV_ERROR
};

const char* name_of(CUresult e) {
  for (const ErrorName& n : kNames)
    if (n.code == e) return n.name;
  return nullptr;
}

const char* described(CUresult e) {
  switch (e) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_DEINITIALIZED: return "driver shutting down";
    case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
    case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
    case CUDA_ERROR_NOT_READY: return "device not ready";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "an illegal memory access was encountered";
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return "too many resources requested for launch";
    case CUDA_ERROR_NOT_SUPPORTED: return "operation not supported";
    case CUDA_ERROR_ILLEGAL_STATE: return "the operation is not permitted in the current state";
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return "part or all of the requested memory range is already mapped";
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return "pointer does not correspond to a registered memory region";
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return "operation not permitted when stream is capturing";
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return "operation failed due to a previous error during capture";
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return nullptr;
  }
}

// "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED" -> "peer access unsupported", kept for
// the life of the process so the pointer handed out stays valid.
const char* spelled_out(CUresult e, const char* name) {
  static std::mutex mu;
  static auto* cache = new std::map<int, std::string>;
  std::lock_guard lock(mu);
  auto& s = (*cache)[e];
  if (s.empty()) {
    std::string n = name;
    const std::string prefix = "CUDA_ERROR_";
    if (n.rfind(prefix, 0) == 0) n = n.substr(prefix.size());
    for (char& c : n) c = c == '_' ? ' ' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    s = n;
  }
  return s.c_str();
}

}  // namespace

SIMDEV_API CUresult CUDAAPI cuGetErrorName(CUresult e, const char** out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  *out = name_of(e);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMDEV_API CUresult CUDAAPI cuGetErrorString(CUresult e, const char** out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  const char* name = name_of(e);
  if (!name) {
    *out = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  const char* d = described(e);
  *out = d ? d : spelled_out(e, name);
  return CUDA_SUCCESS;
}
