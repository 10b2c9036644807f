// Sharing device memory with other processes: shareable handles of VMM
// memory (a POSIX file descriptor) and legacy IPC of cuMemAlloc memory.
//
// A legacy handle names the exporter's process and the memfd there that
// holds the allocation; the opener takes its own copy of that fd with
// pidfd_getfd (the same user and ptrace permission over the exporter, as
// any process that takes another's file descriptor needs).
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "state.h"

using namespace simdev;

namespace {

// What simdev writes into the 64 bytes of a CUipcMemHandle.
struct LegacyHandle {
  static constexpr uint32_t kMagic = 0x53444950;  // "SDIP"
  uint32_t magic = kMagic;
  int32_t pid = 0;        // the exporter
  int32_t fd = -1;        // the memfd, in the exporter
  uint32_t reserved = 0;
  uint64_t bytes = 0;     // the allocation's memory (whole pages)
  uint64_t buffer_id = 0;  // the exporter's allocation
};
static_assert(sizeof(LegacyHandle) <= sizeof(CUipcMemHandle));

// This process's copy of the exporter's fd, or -1 (errno set).
int take_fd(pid_t pid, int fd) {
  const long pidfd = syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) return -1;
  const long own = syscall(SYS_pidfd_getfd, static_cast<int>(pidfd), fd, 0);
  const int saved = errno;
  close(static_cast<int>(pidfd));
  errno = saved;
  return static_cast<int>(own);
}

}  // namespace

SIMDEV_API CUresult CUDAAPI cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                                         CUmemAllocationHandleType type, unsigned long long flags) {
  SIMDEV_ENTER("cuMemExportToShareableHandle", CUDA_ERROR_OUT_OF_MEMORY);
  if (!shareable || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // POSIX file descriptors only: simdev models no Win32 handle or fabric.
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  int fd = -1;
  if (CUresult e = state().memory.export_fd(handle, &fd)) return e;
  std::memcpy(shareable, &fd, sizeof fd);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                                           CUmemAllocationHandleType type) {
  SIMDEV_ENTER("cuMemImportFromShareableHandle", CUDA_ERROR_OUT_OF_MEMORY);
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  // The fd travels in the pointer argument itself, as the driver documents
  // for POSIX file descriptors.
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
  return state().memory.import_fd(fd, handle);
}

SIMDEV_API CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  SIMDEV_ENTER_CTX("cuIpcGetMemHandle", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  (void)ctx;
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  LegacyHandle h;
  h.pid = static_cast<int32_t>(getpid());
  if (CUresult e = state().memory.ipc_export(dptr, &h.fd, &h.bytes, &h.buffer_id)) return e;
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle, &h, sizeof h);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuIpcOpenMemHandle_v2", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  if (!dptr || (flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0) return CUDA_ERROR_INVALID_VALUE;
  LegacyHandle h;
  std::memcpy(static_cast<void*>(&h), &handle, sizeof h);
  if (h.magic != LegacyHandle::kMagic || h.pid <= 0 || h.fd < 0) return CUDA_ERROR_INVALID_VALUE;
  // The process that made the handle cannot open it (UNCONFIRMED which
  // error the driver gives: INVALID_CONTEXT is the documented one that fits).
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  const int fd = take_fd(h.pid, h.fd);
  if (fd < 0) return errno == EPERM ? CUDA_ERROR_NOT_PERMITTED : CUDA_ERROR_INVALID_HANDLE;
  const uint64_t key = static_cast<uint64_t>(h.pid) << 32 ^ h.buffer_id;
  uint64_t p = 0;
  State& s = state();
  std::lock_guard lock(s.ctx_mu);  // peer access does not change meanwhile
  if (CUresult e = s.memory.ipc_open(fd, h.bytes, key, ctx->device, ctx, memalloc_access_mask_locked(ctx), &p))
    return e;
  *dptr = p;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  SIMDEV_ENTER_CTX("cuIpcCloseMemHandle", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)ctx;
  return state().memory.ipc_close(dptr);
}
