// cuGetProcAddress: libcudart (so every cudaMalloc), PyTorch and NCCL get
// driver functions this way. The real driver picks the entry point for the
// requested version and default-stream flavour; when it picks a function
// tierrt wraps, the caller gets tierrt's wrapper of exactly that form. A
// request for cuGetProcAddress itself gets this wrapper.
#include "hooks.h"

using namespace tierrt::preload;

extern "C" {

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  auto real = TIERRT_REAL(cuGetProcAddress_v2, cuGetProcAddress_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn && *pfn) *pfn = substitute_address(*pfn);
  return r;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  auto real = TIERRT_REAL(cuGetProcAddress, cuGetProcAddress);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn && *pfn) *pfn = substitute_address(*pfn);
  return r;
}

}  // extern "C"
