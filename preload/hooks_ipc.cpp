// IPC hooks: legacy IPC handles of memory tierrt handed out are tierrt's own
// (its chunk exported as a POSIX fd, runtime/ipc_shim.h), and so is opening
// one; a handle of the driver's, and memory tierrt did not hand out, reach
// the driver untouched. cuMemRetainAllocationHandle on tierrt's memory pins
// the block first: the handle may be exported.
#include "hooks.h"
#include "runtime/engine.h"
#include "runtime/ipc_shim.h"

using namespace tierrt;
using namespace tierrt::preload;

extern "C" {

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr p) {
  CUresult r = CUDA_SUCCESS;
  if (Engine* e = Engine::owning(p); e && ipc::get_handle(*e, handle, p, &r)) return r;
  return TIERRT_REAL(cuIpcGetMemHandle, cuIpcGetMemHandle)(handle, p);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, CUipcMemHandle handle, unsigned flags) {
  // tierrt's handles open without an engine: a process that only imports
  // may never allocate.
  if (ipc::is_tierrt_handle(handle)) return ipc::open_handle(handle, p);
  return TIERRT_REAL(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle_v2)(p, handle, flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  CUresult r = CUDA_SUCCESS;
  if (ipc::close_handle(p, &r)) return r;
  return TIERRT_REAL(cuIpcCloseMemHandle, cuIpcCloseMemHandle)(p);
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  const CUdeviceptr p = reinterpret_cast<CUdeviceptr>(addr);
  CUresult r = CUDA_SUCCESS;
  if (Engine* e = Engine::owning(p); e && ipc::before_retain(*e, p, &r) && r != CUDA_SUCCESS) return r;
  return TIERRT_REAL(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle)(handle, addr);
}

}  // extern "C"
