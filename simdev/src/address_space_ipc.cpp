// Physical memory shared between processes: POSIX file descriptors of VMM
// handles (cuMemExportToShareableHandle, cuMemImportFromShareableHandle)
// and legacy IPC of cuMemAlloc memory (cuIpcGetMemHandle and friends).
// A handle's memory moves into a memfd of its own at its first export (a
// range of the shared one would give the other process every other
// allocation's bytes too), and cuMemAlloc memory moves into one when it is
// first shared, so another process maps the very same pages. Such a memfd
// is closed when released, never recycled: another process may still map it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "address_space.h"
#include "huge_pages.h"
#include "phys_pool.h"
#include "unmap_reaper.h"

namespace simdev {

namespace {

constexpr char kMemfdName[] = "simdev-physical";

// A new memfd of `size` bytes holding a copy of `bytes`; -1 on failure.
int memfd_holding(const void* bytes, uint64_t size) {
  const int mfd = memfd_create(kMemfdName, MFD_CLOEXEC);
  if (mfd < 0) return -1;
  void* staging = MAP_FAILED;
  if (ftruncate(mfd, static_cast<off_t>(size)) == 0) staging = map_shared_huge(mfd, size);
  if (staging == MAP_FAILED) {
    close(mfd);
    return -1;
  }
  std::memcpy(staging, bytes, size);
  munmap(staging, size);
  return mfd;
}

// The memfds simdev makes are named kMemfdName: anything else is not memory
// of a simulated device.
bool is_simdev_memfd(int fd) {
  char link[64], target[128];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return std::strncmp(target, "/memfd:", 7) == 0 && std::strncmp(target + 7, kMemfdName, sizeof kMemfdName - 1) == 0;
}

bool unmap_to_none(uint64_t va, uint64_t size) {
  void* p = mmap(reinterpret_cast<void*>(va), size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  return p != MAP_FAILED;
}

}  // namespace

CUresult AddressSpace::export_fd(CUmemGenericAllocationHandle h, int* fd) {
  std::unique_lock lock(mu_);
  auto it = handles_.find(h);
  if (it == handles_.end()) return CUDA_ERROR_INVALID_VALUE;
  PhysAlloc& phys = *it->second.phys;
  // Only a handle created with the type requested can be exported
  // (cuMemExportToShareableHandle; which error the driver gives otherwise
  // is UNCONFIRMED).
  if ((phys.prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0 || phys.fd < 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (phys.carved)
    if (CUresult e = move_to_own_memfd_locked(it->second.phys)) return e;
  const int out = fcntl(phys.fd, F_DUPFD_CLOEXEC, 0);
  if (out < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *fd = out;
  return CUDA_SUCCESS;
}

// The driver makes a handle's fd only when it is exported, and a tiering
// allocator makes every chunk exportable in case the application shares it:
// a memfd per such handle from the start would cap the live handles at the
// process's fd limit. So exportable handles are carved like the rest and
// move here, at their first export: work using them finishes first
// (nothing starts meanwhile, mu_ is held), so no write is lost.
CUresult AddressSpace::move_to_own_memfd_locked(const std::shared_ptr<PhysAlloc>& phys) {
  PhysAlloc& p = *phys;
  std::vector<Mapping*> maps;
  for (auto& [base, r] : reservations_)
    for (auto& [va, m] : r.maps)
      if (m.phys == phys) maps.push_back(&m);
  for (Mapping* m : maps) wait_until_unused(m->va, m->va + m->size, false);
  void* from = map_shared_huge(p.fd, p.size, p.fd_offset);
  if (from == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const int mfd = memfd_holding(from, p.size);
  munmap(from, p.size);
  if (mfd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  for (Mapping* m : maps) {
    // Moved off its VA (mapped again, no access given yet): the VA stays
    // without access, now on the new memory.
    if (m->ghost_at != 0) {
      unmap_later(m->ghost_area, m->ghost_area_size);
      m->ghost_at = m->ghost_area = m->ghost_area_size = 0;
      m->ghost_prot = 0;
      m->applied_prot = PROT_NONE;
    }
    void* at = mmap(reinterpret_cast<void*>(m->va), m->size, m->applied_prot, MAP_SHARED | MAP_FIXED, mfd,
                    static_cast<off_t>(m->offset));
    if (at == MAP_FAILED) {
      // The VA maps nothing usable now: its work faults, never reaching
      // bytes that are no longer the handle's.
      (void)mmap(reinterpret_cast<void*>(m->va), m->size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
      m->applied_prot = PROT_NONE;
    } else {
      ask_for_huge_pages(at, m->size);
    }
    m->filled.v.store(false);
  }
  // Ghosts hold the carved range's pages at VAs that map it no more.
  for (auto g = ghosts_.begin(); g != ghosts_.end();) {
    if (g->second.phys.lock() != phys) {
      ++g;
      continue;
    }
    bury(g->first, g->second);
    g = ghosts_.erase(g);
  }
  phys_pool().give_memory(PhysMemory{p.fd, p.fd_offset, true, p.resident}, p.size);
  p.fd = mfd;
  p.fd_offset = 0;
  p.carved = false;
  p.resident = false;
  return CUDA_SUCCESS;
}

CUresult AddressSpace::import_fd(int fd, CUmemGenericAllocationHandle* out) {
  struct stat st {};
  if (fd < 0 || !is_simdev_memfd(fd) || fstat(fd, &st) != 0 || st.st_size <= 0 ||
      !aligned_to(static_cast<uint64_t>(st.st_size), kGranularity))
    return CUDA_ERROR_INVALID_VALUE;
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);  // the caller keeps and closes its fd
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  auto phys = std::make_shared<PhysAlloc>();
  phys->fd = own;
  phys->size = static_cast<uint64_t>(st.st_size);
  phys->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  phys->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  phys->prop.location.id = 0;
  phys->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  // The exporter's device holds the memory: nothing is charged here.
  std::unique_lock lock(mu_);
  const CUmemGenericAllocationHandle h = next_handle_++;
  handles_[h] = HandleEntry{std::move(phys), 1};
  *out = h;
  return CUDA_SUCCESS;
}

CUresult AddressSpace::ipc_export(uint64_t base, int* fd, uint64_t* bytes, uint64_t* buffer_id) {
  std::unique_lock lock(mu_);
  auto it = reservations_.find(base);
  // The base of a cuMemAlloc allocation only: VMM memory is shared through
  // cuMemExportToShareableHandle instead.
  if (it == reservations_.end() || it->second.origin != Origin::kMemAlloc || it->second.maps.empty())
    return CUDA_ERROR_INVALID_VALUE;
  Reservation& r = it->second;
  Mapping& m = r.maps.begin()->second;
  PhysAlloc& phys = *m.phys;
  if (phys.fd < 0) {
    // Anonymous shared memory until now: its bytes move into a memfd mapped
    // at the same address. Work using it finishes first (nothing starts
    // meanwhile: mu_ is held), so no write is lost.
    wait_until_unused(m.va, m.va + m.size, false);
    const int mfd = memfd_holding(reinterpret_cast<const void*>(m.va), m.size);
    if (mfd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    void* p = mmap(reinterpret_cast<void*>(m.va), m.size, m.applied_prot, MAP_SHARED | MAP_FIXED, mfd, 0);
    if (p == MAP_FAILED) {
      close(mfd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ask_for_huge_pages(p, m.size);
    phys.fd = mfd;
    phys.resident = false;
  }
  *fd = phys.fd;
  *bytes = m.size;
  *buffer_id = r.buffer_id;
  return CUDA_SUCCESS;
}

CUresult AddressSpace::ipc_open(int fd, uint64_t bytes, uint64_t key, int device, const void* owner,
                                unsigned device_mask, uint64_t* out) {
  std::unique_lock lock(mu_);
  auto known = ipc_opened_.find(key);
  if (known != ipc_opened_.end()) {
    // Opened by this process already: counted again, same address (the
    // driver's reference count per handle and context).
    close(fd);
    ++known->second.refs;
    *out = known->second.base;
    return CUDA_SUCCESS;
  }
  struct stat st {};
  if (!is_simdev_memfd(fd) || fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes || bytes == 0) {
    close(fd);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  uint64_t base = 0;
  if (CUresult e = alloc_va(bytes, kGranularity, 0, &base)) {
    close(fd);
    return e;
  }
  void* p = mmap(reinterpret_cast<void*>(base), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    free_va(base, bytes);
    return CUDA_ERROR_MAP_FAILED;
  }
  ask_for_huge_pages(p, bytes);
  auto phys = std::make_shared<PhysAlloc>();
  phys->fd = fd;
  phys->size = bytes;
  phys->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  phys->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  phys->prop.location.id = device;
  Reservation r;
  r.size = bytes;
  r.user_size = bytes;
  r.origin = Origin::kIpcOpen;
  r.device = device;
  r.owner = owner;
  r.device_mask = device_mask;
  place_whole_locked(base, bytes, std::move(r), std::move(phys));
  ipc_opened_[key] = IpcOpened{base, 1};
  *out = base;
  return CUDA_SUCCESS;
}

CUresult AddressSpace::ipc_close(uint64_t base) {
  std::unique_lock lock(mu_);
  auto it = reservations_.find(base);
  if (it == reservations_.end() || it->second.origin != Origin::kIpcOpen) return CUDA_ERROR_INVALID_VALUE;
  for (auto o = ipc_opened_.begin(); o != ipc_opened_.end(); ++o) {
    if (o->second.base != base) continue;
    if (--o->second.refs > 0) return CUDA_SUCCESS;
    ipc_opened_.erase(o);
    break;
  }
  const uint64_t size = it->second.size;
  wait_until_unused(base, base + size);
  if (!unmap_to_none(base, size)) return CUDA_ERROR_UNKNOWN;
  reservations_.erase(it);
  free_va(base, size);
  return CUDA_SUCCESS;
}

}  // namespace simdev
