// Module and library hooks: which handles are functions and which are
// library kernels (the driver describes their parameters through different
// calls), and unloads, after which a handle may name a new function. The
// parameter layouts are the process's, so these work before the engine runs.
#include "hooks.h"
#include "runtime/engine.h"

using namespace tierrt;
using namespace tierrt::preload;

extern "C" {

CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  const CUresult r = TIERRT_REAL(cuModuleGetFunction, cuModuleGetFunction)(f, m, name);
  if (r == CUDA_SUCCESS && f) Engine::note_function(*f);
  return r;
}

CUresult cuLibraryGetKernel(CUkernel* k, CUlibrary lib, const char* name) {
  const CUresult r = TIERRT_REAL(cuLibraryGetKernel, cuLibraryGetKernel)(k, lib, name);
  if (r == CUDA_SUCCESS && k) Engine::note_kernel(*k);
  return r;
}

CUresult cuKernelGetFunction(CUfunction* f, CUkernel k) {
  const CUresult r = TIERRT_REAL(cuKernelGetFunction, cuKernelGetFunction)(f, k);
  if (r == CUDA_SUCCESS && f) Engine::note_function(*f);
  return r;
}

CUresult cuModuleUnload(CUmodule m) {
  const CUresult r = TIERRT_REAL(cuModuleUnload, cuModuleUnload)(m);
  if (r == CUDA_SUCCESS) Engine::note_unload();
  return r;
}

CUresult cuLibraryUnload(CUlibrary lib) {
  const CUresult r = TIERRT_REAL(cuLibraryUnload, cuLibraryUnload)(lib);
  if (r == CUDA_SUCCESS) Engine::note_unload();
  return r;
}

}  // extern "C"
