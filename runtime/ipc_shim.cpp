// IPC of tierrt's memory (runtime/ipc_shim.h): the exporter's side keeps
// one fd per exported allocation open while the allocation lives; the
// importer's side maps the chunk behind that fd.
#include "runtime/ipc_shim.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "allocator/ranked_mutex.h"
#include "driver/driver.h"
#include "log.h"
#include "runtime/engine.h"

namespace tierrt::ipc {

namespace {

// An allocation this process exported: its fd stays open while it lives.
struct Exported {
  CUdeviceptr base = 0;
  std::uint64_t buffer_id = 0;
  int fd = -1;
};
// A chunk of another process mapped here.
struct Opened {
  std::int32_t pid = 0;
  std::uint64_t buffer_id = 0;
  CUdeviceptr va = 0;  // the chunk's mapping
  std::uint64_t chunk_bytes = 0, offset = 0;
  int refs = 0;
};
constexpr int kMaxExported = 1024, kMaxOpened = 1024;

struct Registries {
  RankedMutex mu{kRankIpc, "runtime.ipc"};
  Exported exported[kMaxExported];
  int nexported = 0;
  Opened opened[kMaxOpened];
  int nopened = 0;
};
Registries& registries() noexcept {
  static Registries r;
  return r;
}

// The driver's answer forwarded: the address is not tierrt's.
constexpr CUresult kNotOurs = static_cast<CUresult>(-1);

// The live allocation `p` is in, from the engine's records.
bool live_allocation(Engine& e, CUdeviceptr p, CUdeviceptr* base, std::size_t* bytes) noexcept {
  return e.address_range(base, bytes, p, [] { return kNotOurs; }) == CUDA_SUCCESS;
}

std::uint64_t buffer_id_of(Engine& e, CUdeviceptr p) noexcept {
  unsigned long long id = 0;
  auto driver = [] { return kNotOurs; };
  return e.pointer_attribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p, driver) == CUDA_SUCCESS ? id : 0;
}

// Pins the block holding `base` for good. A small allocation's slab never
// moves (the engine has no block to pin for it: its mapping is the
// driver's to describe).
CUresult pin_for_export(Engine& e, CUdeviceptr base) noexcept {
  if (e.keep_exported(base)) return CUDA_SUCCESS;
  std::size_t mapped = 0;
  bool slot = false;
  const CUresult r = e.pointer_attribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, base, [&] {
    slot = true;
    return CUDA_SUCCESS;
  });
  return r == CUDA_SUCCESS && slot ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

// The chunk mapped at `p`: each of tierrt's chunks is alone in a
// reservation of its size, which the driver reports as the range.
CUresult chunk_at(CUdeviceptr p, CUdeviceptr* va, std::size_t* bytes) noexcept {
  CUresult r = TIERRT_CU(cuPointerGetAttribute, va, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p);
  if (r == CUDA_SUCCESS) r = TIERRT_CU(cuPointerGetAttribute, bytes, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p);
  return r;
}

// Closes the fds of exported allocations that were freed since.
void forget_freed_locked(Engine& e, Registries& reg) noexcept {
  for (int i = 0; i < reg.nexported;) {
    Exported& x = reg.exported[i];
    if (buffer_id_of(e, x.base) == x.buffer_id) {
      ++i;
      continue;
    }
    close(x.fd);
    x = reg.exported[--reg.nexported];
  }
}

// The exporter's fd for the live allocation at `base`: the one made
// before, or a new one of its chunk.
CUresult exported_fd(Engine& e, CUdeviceptr base, std::uint64_t id, CUdeviceptr chunk, int* fd) noexcept {
  Registries& reg = registries();
  {
    std::lock_guard<RankedMutex> l(reg.mu);
    forget_freed_locked(e, reg);
    for (int i = 0; i < reg.nexported; ++i)
      if (reg.exported[i].base == base && reg.exported[i].buffer_id == id) {
        *fd = reg.exported[i].fd;
        return CUDA_SUCCESS;
      }
  }
  CUmemGenericAllocationHandle h = 0;
  CUresult r = TIERRT_CU(cuMemRetainAllocationHandle, &h, reinterpret_cast<void*>(chunk));
  if (r != CUDA_SUCCESS) return r;
  int made = -1;
  r = TIERRT_CU(cuMemExportToShareableHandle, &made, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0ull);
  (void)TIERRT_CU(cuMemRelease, h);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<RankedMutex> l(reg.mu);
  for (int i = 0; i < reg.nexported; ++i)
    if (reg.exported[i].base == base && reg.exported[i].buffer_id == id) {  // another thread was first
      close(made);
      *fd = reg.exported[i].fd;
      return CUDA_SUCCESS;
    }
  if (reg.nexported == kMaxExported) {
    close(made);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  reg.exported[reg.nexported++] = Exported{base, id, made};
  *fd = made;
  return CUDA_SUCCESS;
}

// This process's copy of fd `fd` of process `pid`; -1 with errno set.
int take_fd(pid_t pid, int fd) noexcept {
  const long pidfd = syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) return -1;
  const long own = syscall(SYS_pidfd_getfd, static_cast<int>(pidfd), fd, 0);
  const int saved = errno;
  close(static_cast<int>(pidfd));
  errno = saved;
  return static_cast<int>(own);
}

// Maps the chunk behind `fd` at a new address, read-write for the current
// device.
CUresult map_chunk(int fd, std::uint64_t bytes, CUdeviceptr* va) noexcept {
  CUmemGenericAllocationHandle h = 0;
  CUresult r = TIERRT_CU(cuMemImportFromShareableHandle, &h, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS) return r;
  CUdevice dev = 0;
  r = TIERRT_CU(cuCtxGetDevice, &dev);
  if (r == CUDA_SUCCESS) r = TIERRT_CU(cuMemAddressReserve, va, bytes, std::size_t{0}, CUdeviceptr{0}, 0ull);
  if (r != CUDA_SUCCESS) {
    (void)TIERRT_CU(cuMemRelease, h);
    return r;
  }
  r = TIERRT_CU(cuMemMap, *va, bytes, std::size_t{0}, h, 0ull);
  (void)TIERRT_CU(cuMemRelease, h);  // the mapping holds the memory
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc acc{};
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = TIERRT_CU(cuMemSetAccess, *va, bytes, &acc, std::size_t{1});
    if (r != CUDA_SUCCESS) (void)TIERRT_CU(cuMemUnmap, *va, bytes);
  }
  if (r != CUDA_SUCCESS) (void)TIERRT_CU(cuMemAddressFree, *va, bytes);
  return r;
}

void unmap_chunk(CUdeviceptr va, std::uint64_t bytes) noexcept {
  if (TIERRT_CU(cuMemUnmap, va, bytes) == CUDA_SUCCESS) (void)TIERRT_CU(cuMemAddressFree, va, bytes);
}

}  // namespace

bool is_tierrt_handle(const CUipcMemHandle& h) noexcept {
  Record rec;
  std::memcpy(static_cast<void*>(&rec), &h, sizeof rec);
  return rec.magic == Record::kMagic;
}

bool get_handle(Engine& e, CUipcMemHandle* out, CUdeviceptr p, CUresult* result) noexcept {
  CUdeviceptr base = 0;
  std::size_t bytes = 0;
  if (!live_allocation(e, p, &base, &bytes)) return false;
  // The base of an allocation only, as the driver requires.
  if (out == nullptr || base != p) {
    *result = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  const std::uint64_t id = buffer_id_of(e, base);
  Record rec;
  CUdeviceptr chunk = 0;
  std::size_t chunk_bytes = 0;
  int fd = -1;
  CUresult r = pin_for_export(e, base);
  if (r == CUDA_SUCCESS) r = chunk_at(base, &chunk, &chunk_bytes);
  if (r == CUDA_SUCCESS && base - chunk + bytes > chunk_bytes) {
    // A granule group: one chunk per member, which one fd cannot share.
    TIERRT_LOG(Error, "cuIpcGetMemHandle(0x%llx): this allocation of %llu bytes is tiered per granule group "
                      "(TIERRT_GRANULE_BYTES) and cannot be shared; set TIERRT_GRANULE_BYTES above its size",
               static_cast<unsigned long long>(p), static_cast<unsigned long long>(bytes));
    *result = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  if (r == CUDA_SUCCESS) r = exported_fd(e, base, id, chunk, &fd);
  if (r != CUDA_SUCCESS) {
    TIERRT_LOG(Warn, "cuIpcGetMemHandle(0x%llx): its chunk could not be exported as a POSIX fd: %s",
               static_cast<unsigned long long>(p), drv::result_name(r));
    *result = r;
    return true;
  }
  rec.pid = static_cast<std::int32_t>(getpid());
  rec.fd = fd;
  rec.offset = base - chunk;
  rec.bytes = bytes;
  rec.chunk_bytes = chunk_bytes;
  rec.buffer_id = id;
  std::memset(out, 0, sizeof *out);
  std::memcpy(out, &rec, sizeof rec);
  *result = CUDA_SUCCESS;
  return true;
}

CUresult open_handle(const CUipcMemHandle& h, CUdeviceptr* out) noexcept {
  Record rec;
  std::memcpy(static_cast<void*>(&rec), &h, sizeof rec);
  if (out == nullptr || rec.version != Record::kVersion || rec.pid <= 0 || rec.fd < 0 || rec.chunk_bytes == 0 ||
      rec.offset + rec.bytes > rec.chunk_bytes)
    return CUDA_ERROR_INVALID_VALUE;
  // As the driver: the process that made a handle cannot open it.
  if (rec.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  Registries& reg = registries();
  {
    std::lock_guard<RankedMutex> l(reg.mu);
    for (int i = 0; i < reg.nopened; ++i)
      if (reg.opened[i].pid == rec.pid && reg.opened[i].buffer_id == rec.buffer_id) {
        ++reg.opened[i].refs;
        *out = reg.opened[i].va + reg.opened[i].offset;
        return CUDA_SUCCESS;
      }
  }
  const int fd = take_fd(rec.pid, rec.fd);
  if (fd < 0) {
    const int err = errno;
    TIERRT_LOG(Error,
               "cuIpcOpenMemHandle: cannot take the exporter's memory (pid %d, fd %d): pidfd_getfd: %s; the "
               "importer needs ptrace permission over the exporter (the same user; under Yama's "
               "kernel.yama.ptrace_scope=1 the exporter must allow it with prctl(PR_SET_PTRACER))",
               static_cast<int>(rec.pid), static_cast<int>(rec.fd), std::strerror(err));
    return err == EPERM ? CUDA_ERROR_NOT_PERMITTED : CUDA_ERROR_INVALID_HANDLE;
  }
  CUdeviceptr va = 0;
  const CUresult r = map_chunk(fd, rec.chunk_bytes, &va);
  close(fd);  // the imported handle holds the memory
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<RankedMutex> l(reg.mu);
  for (int i = 0; i < reg.nopened; ++i)
    if (reg.opened[i].pid == rec.pid && reg.opened[i].buffer_id == rec.buffer_id) {  // another thread was first
      ++reg.opened[i].refs;
      *out = reg.opened[i].va + reg.opened[i].offset;
      unmap_chunk(va, rec.chunk_bytes);
      return CUDA_SUCCESS;
    }
  if (reg.nopened == kMaxOpened) {
    unmap_chunk(va, rec.chunk_bytes);
    return CUDA_ERROR_TOO_MANY_PEERS;
  }
  reg.opened[reg.nopened++] = Opened{rec.pid, rec.buffer_id, va, rec.chunk_bytes, rec.offset, 1};
  *out = va + rec.offset;
  return CUDA_SUCCESS;
}

bool close_handle(CUdeviceptr p, CUresult* result) noexcept {
  Registries& reg = registries();
  CUdeviceptr va = 0;
  std::uint64_t bytes = 0;
  {
    std::lock_guard<RankedMutex> l(reg.mu);
    int i = 0;
    while (i < reg.nopened && reg.opened[i].va + reg.opened[i].offset != p) ++i;
    if (i == reg.nopened) return false;
    *result = CUDA_SUCCESS;
    if (--reg.opened[i].refs > 0) return true;
    va = reg.opened[i].va;
    bytes = reg.opened[i].chunk_bytes;
    reg.opened[i] = reg.opened[--reg.nopened];
  }
  unmap_chunk(va, bytes);
  return true;
}

bool before_retain(Engine& e, CUdeviceptr p, CUresult* result) noexcept {
  CUdeviceptr base = 0;
  std::size_t bytes = 0;
  if (!live_allocation(e, p, &base, &bytes)) return false;
  *result = pin_for_export(e, base);
  return true;
}

bool exportable_memory() noexcept {
  static std::atomic<int> known{-1};
  int v = known.load(std::memory_order_relaxed);
  if (v >= 0) return v != 0;
  CUdevice dev = 0;
  int supported = 0;
  v = TIERRT_CU(cuCtxGetDevice, &dev) == CUDA_SUCCESS &&
              TIERRT_CU(cuDeviceGetAttribute, &supported,
                        CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) == CUDA_SUCCESS &&
              supported != 0
          ? 1
          : 0;
  known.store(v, std::memory_order_relaxed);
  return v != 0;
}

}  // namespace tierrt::ipc
