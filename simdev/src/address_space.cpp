#include "address_space.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "huge_pages.h"
#include "phys_pool.h"
#include "state.h"
#include "unmap_reaper.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels answer EINVAL, and pages fault in on use
#endif

namespace simdev {

namespace {

constexpr uint64_t kPage = 4096;
// Gap left after each cuMemAlloc range so that running off its end lands in
// unbacked device VA, as it would on a GPU, instead of in a neighbour.
constexpr uint64_t kMemAllocGuard = 64 * 1024;

bool map_none(uint64_t va, uint64_t size) {
  void* p = mmap(reinterpret_cast<void*>(va), size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  return p != MAP_FAILED;
}

int prot_of(CUmemAccess_flags device, CUmemAccess_flags host) {
  auto rank = [](CUmemAccess_flags f) {
    return f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? 2 : f == CU_MEM_ACCESS_FLAGS_PROT_READ ? 1 : 0;
  };
  int r = std::max(rank(device), rank(host));
  return r == 2 ? PROT_READ | PROT_WRITE : r == 1 ? PROT_READ : PROT_NONE;
}

bool overlaps(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1) { return a0 < b1 && b0 < a1; }

}  // namespace

PhysAlloc::~PhysAlloc() {
  // Nothing maps it any more: every mapping holds its PhysAlloc. A memfd of
  // its own (exported or imported) is closed, never handed out again:
  // another process may still map it.
  if (fd >= 0) phys_pool().give_memory(PhysMemory{fd, fd_offset, carved, resident}, size);
  if (counter) counter->fetch_sub(size);
}

CUresult AddressSpace::init(uint64_t va_bytes, uint64_t device_capacity, uint64_t host_capacity) {
  // Over-reserve so the arena can start on a 2 MiB boundary.
  uint64_t want = va_bytes + kGranularity;
  void* p = mmap(nullptr, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t raw = reinterpret_cast<uint64_t>(p);
  arena_base_ = round_up(raw, kGranularity);
  arena_size_ = va_bytes;
  bump_ = arena_base_;
  device_capacity_ = device_capacity;
  host_capacity_ = host_capacity;
  return CUDA_SUCCESS;
}

// Fresh VA first (bump), so a freed range stays unbacked as long as possible
// and a use-after-free is caught; freed ranges are reused once it runs out.
CUresult AddressSpace::alloc_va(uint64_t size, uint64_t alignment, uint64_t hint, uint64_t* out) {
  uint64_t end = arena_base_ + arena_size_;
  if (hint && aligned_to(hint, alignment) && hint >= bump_ && hint + size <= end) {
    if (hint > bump_) free_va_[bump_] = hint - bump_;
    bump_ = hint + size;
    *out = hint;
    return CUDA_SUCCESS;
  }
  uint64_t start = round_up(bump_, alignment);
  if (start + size <= end) {
    if (start > bump_) free_va_[bump_] = start - bump_;
    bump_ = start + size;
    *out = start;
    return CUDA_SUCCESS;
  }
  for (auto it = free_va_.begin(); it != free_va_.end(); ++it) {
    uint64_t b = round_up(it->first, alignment), e = it->first + it->second;
    if (b + size > e) continue;
    uint64_t fb = it->first;
    free_va_.erase(it);
    if (b > fb) free_va_[fb] = b - fb;
    if (b + size < e) free_va_[b + size] = e - (b + size);
    *out = b;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

void AddressSpace::free_va(uint64_t base, uint64_t size) {
  auto [it, inserted] = free_va_.emplace(base, size);
  (void)inserted;
  auto next = std::next(it);
  if (next != free_va_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_va_.erase(next);
  }
  if (it != free_va_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_va_.erase(it);
    }
  }
}

CUresult AddressSpace::reserve(uint64_t size, uint64_t alignment, uint64_t hint, uint64_t* out) {
  if (size == 0 || !aligned_to(size, kGranularity)) return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = kGranularity;
  if ((alignment & (alignment - 1)) != 0 || alignment < kGranularity) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mu_);
  uint64_t base = 0;
  if (CUresult e = alloc_va(size, alignment, hint, &base)) return e;
  Reservation r;
  r.base = base;
  r.size = size;
  r.origin = Origin::kReserve;
  r.buffer_id = next_buffer_id_++;
  reservations_.emplace(base, std::move(r));
  *out = base;
  return CUDA_SUCCESS;
}

CUresult AddressSpace::free_reservation(uint64_t base, uint64_t size) {
  std::unique_lock lock(mu_);
  auto it = reservations_.find(base);
  if (it == reservations_.end() || it->second.origin != Origin::kReserve || it->second.size != size)
    return CUDA_ERROR_INVALID_VALUE;
  // Whatever is still mapped goes with the reservation, as with the driver.
  wait_until_unused(base, base + size);
  if (!map_none(base, size)) return CUDA_ERROR_UNKNOWN;
  // Gone with the range; one moved off it still holds a region of its own.
  for (auto g = ghosts_.lower_bound(base); g != ghosts_.lower_bound(base + size); ++g)
    if (g->second.at != 0) bury(g->first, g->second);
  ghosts_.erase(ghosts_.lower_bound(base), ghosts_.lower_bound(base + size));
  reservations_.erase(it);
  free_va(base, size);
  drop_dead_ghosts();
  return CUDA_SUCCESS;
}

void AddressSpace::bury(uint64_t va, const Ghost& g) {
  if (g.at == 0) map_none(va, g.size);
  else unmap_later(g.area, g.area_size);
}

void AddressSpace::drop_ghosts(uint64_t begin, uint64_t end) {
  auto it = ghosts_.lower_bound(begin);
  if (it != ghosts_.begin() && std::prev(it)->first + std::prev(it)->second.size > begin) --it;
  while (it != ghosts_.end() && it->first < end) {
    bury(it->first, it->second);
    it = ghosts_.erase(it);
  }
}

void AddressSpace::drop_dead_ghosts() {
  for (auto it = ghosts_.begin(); it != ghosts_.end();) {
    if (it->second.phys.expired()) {
      bury(it->first, it->second);  // its pages go back to the pool, or to the kernel
      it = ghosts_.erase(it);
    } else {
      ++it;
    }
  }
}

bool AddressSpace::move_to_ghost(uint64_t va, uint64_t size, Ghost* g) {
  // A region aligned to the granularity, so that whole page-table pages move.
  const uint64_t area_size = size + kGranularity;
  void* p = mmap(nullptr, area_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  const uint64_t area = reinterpret_cast<uint64_t>(p);
  const uint64_t at = (area + kGranularity - 1) & ~uint64_t{kGranularity - 1};
  // MREMAP_DONTUNMAP (Linux 5.13 for shared memory) leaves the VA mapped,
  // with no page tables: never a hole another thread's mmap could be given.
  // Replacing that empty mapping with PROT_NONE then costs nothing.
  if (mremap(reinterpret_cast<void*>(va), size, size, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP,
             reinterpret_cast<void*>(at)) == MAP_FAILED) {
    munmap(p, area_size);
    return false;  // an older kernel, or the range spans two of Linux's mappings: nothing moved
  }
  if (!map_none(va, size)) {
    unmap_later(area, area_size);  // the VA still maps the memory (refaulted on use)
    return false;
  }
  g->at = at;
  g->area = area;
  g->area_size = area_size;
  return true;
}

std::shared_ptr<PhysAlloc> AddressSpace::new_phys(uint64_t size, const CUmemAllocationProp& prop,
                                                 bool anonymous, CUresult* err) {
  bool on_host = prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE;
  std::atomic<uint64_t>& counter = on_host ? host_used_ : device_used_[prop.location.id];
  uint64_t cap = on_host ? host_capacity_ : device_capacity_;
  uint64_t used = counter.load();
  do {
    if (used + size > cap || used + size < used) {
      *err = CUDA_ERROR_OUT_OF_MEMORY;
      return nullptr;
    }
  } while (!counter.compare_exchange_weak(used, used + size));
  auto phys = std::make_shared<PhysAlloc>();
  phys->size = size;
  phys->prop = prop;
  phys->on_host = on_host;
  phys->counter = &counter;
  if (!anonymous) {
    // Carved, exportable or not: one that is exported moves to a memfd of
    // its own then (move_to_own_memfd_locked).
    PhysMemory m;
    if (phys_pool().take_memory(size, &m)) {
      phys->fd = m.fd;
      phys->fd_offset = m.offset;
      phys->carved = m.carved;
      phys->resident = m.resident;
    }
    if (phys->fd < 0) {
      *err = CUDA_ERROR_OUT_OF_MEMORY;
      return nullptr;  // the destructor returns the bytes
    }
  }
  *err = CUDA_SUCCESS;
  return phys;
}

CUresult AddressSpace::create(uint64_t size, const CUmemAllocationProp& prop, CUmemGenericAllocationHandle* out) {
  if (size == 0 || !aligned_to(size, kGranularity)) return CUDA_ERROR_INVALID_VALUE;
  CUresult err;
  auto phys = new_phys(size, prop, false, &err);
  if (!phys) return err;
  std::unique_lock lock(mu_);
  CUmemGenericAllocationHandle h = next_handle_++;
  handles_[h] = HandleEntry{std::move(phys), 1};
  *out = h;
  return CUDA_SUCCESS;
}

CUresult AddressSpace::release(CUmemGenericAllocationHandle h) {
  std::unique_lock lock(mu_);
  auto it = handles_.find(h);
  if (it == handles_.end()) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second.user_refs == 0) {
    handles_.erase(it);  // mappings keep the memory alive
    drop_dead_ghosts();
  }
  return CUDA_SUCCESS;
}

CUresult AddressSpace::retain(uint64_t addr, CUmemGenericAllocationHandle* out) {
  std::unique_lock lock(mu_);
  Reservation* r = reservation_of(addr);
  if (!r || r->origin != Origin::kReserve) return CUDA_ERROR_INVALID_VALUE;
  auto m = r->maps.upper_bound(addr);
  if (m == r->maps.begin()) return CUDA_ERROR_INVALID_VALUE;
  --m;
  if (addr >= m->second.va + m->second.size) return CUDA_ERROR_INVALID_VALUE;
  for (auto& [h, e] : handles_) {
    if (e.phys == m->second.phys) {
      ++e.user_refs;
      *out = h;
      return CUDA_SUCCESS;
    }
  }
  CUmemGenericAllocationHandle h = next_handle_++;
  handles_[h] = HandleEntry{m->second.phys, 1};
  *out = h;
  return CUDA_SUCCESS;
}

CUresult AddressSpace::properties(CUmemGenericAllocationHandle h, CUmemAllocationProp* out) {
  std::shared_lock lock(mu_);
  auto it = handles_.find(h);
  if (it == handles_.end()) return CUDA_ERROR_INVALID_VALUE;
  *out = it->second.phys->prop;
  return CUDA_SUCCESS;
}

Reservation* AddressSpace::reservation_of(uint64_t p) {
  auto it = reservations_.upper_bound(p);
  if (it == reservations_.begin()) return nullptr;
  --it;
  return p < it->second.base + it->second.size ? &it->second : nullptr;
}

const Reservation* AddressSpace::reservation_of(uint64_t p) const {
  return const_cast<AddressSpace*>(this)->reservation_of(p);
}

const HostRange* AddressSpace::host_range_of(uint64_t p) const {
  auto it = host_ranges_.upper_bound(p);
  if (it == host_ranges_.begin()) return nullptr;
  --it;
  return p < it->second.base + it->second.size ? &it->second : nullptr;
}

CUresult AddressSpace::map(uint64_t va, uint64_t size, uint64_t offset, CUmemGenericAllocationHandle h) {
  if (!aligned_to(va, kGranularity) || size == 0 || !aligned_to(size, kGranularity) ||
      offset % kGranularity != 0)
    return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mu_);
  auto hit = handles_.find(h);
  if (hit == handles_.end()) return CUDA_ERROR_INVALID_HANDLE;
  auto phys = hit->second.phys;
  if (offset + size > phys->size) return CUDA_ERROR_INVALID_VALUE;
  Reservation* r = reservation_of(va);
  if (!r || r->origin != Origin::kReserve || va + size > r->base + r->size) return CUDA_ERROR_INVALID_VALUE;
  for (auto& [mva, m] : r->maps)
    if (overlaps(va, va + size, mva, mva + m.size)) return CUDA_ERROR_INVALID_VALUE;
  // The same memory unmapped from here last: still in place, no access.
  auto g = ghosts_.find(va);
  bool revived = g != ghosts_.end() && g->second.size == size && g->second.offset == offset &&
                 g->second.phys.lock() == phys;
  bool filled = revived && g->second.filled;
  Ghost moved;
  if (revived && g->second.at != 0) {
    // Moved off the VA, which holds nothing (no access yet, as a fresh
    // mapping has none): it comes back with the first access granted.
    moved = g->second;
    ghosts_.erase(g);
  } else if (revived) {
    ghosts_.erase(g);  // in place, PROT_NONE
  } else {
    drop_ghosts(va, va + size);
    void* p = mmap(reinterpret_cast<void*>(va), size, PROT_NONE, MAP_SHARED | MAP_FIXED, phys->fd,
                   static_cast<off_t>(phys->fd_offset + offset));
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    ask_for_huge_pages(p, size);
  }
  Mapping m;
  m.va = va;
  m.size = size;
  m.offset = offset;
  m.filled = Mapping::FillFlag(filled);
  m.phys = std::move(phys);
  m.ghost_at = moved.at;
  m.ghost_area = moved.area;
  m.ghost_area_size = moved.area_size;
  m.ghost_prot = moved.prot;
  r->maps.emplace(va, std::move(m));
  return CUDA_SUCCESS;
}

bool AddressSpace::take_ghost_back(Mapping& m) {
  const uint64_t at = m.ghost_at, area = m.ghost_area, area_size = m.ghost_area_size;
  m.ghost_at = m.ghost_area = m.ghost_area_size = 0;
  // Replaces the PROT_NONE placeholder at the VA in one step.
  if (mremap(reinterpret_cast<void*>(at), m.size, m.size, MREMAP_MAYMOVE | MREMAP_FIXED,
             reinterpret_cast<void*>(m.va)) != MAP_FAILED) {
    // What is left of its region (unpopulated) goes now, never the hole the
    // move left: another mapping may be given that address at once.
    if (at > area) munmap(reinterpret_cast<void*>(area), at - area);
    const uint64_t tail = area + area_size - (at + m.size);
    if (tail != 0) munmap(reinterpret_cast<void*>(at + m.size), tail);
    m.applied_prot = m.ghost_prot;
    return true;
  }
  unmap_later(area, area_size);
  // The same memory afresh: its pages fault in again.
  m.filled.v.store(false);
  m.applied_prot = PROT_NONE;
  void* p = mmap(reinterpret_cast<void*>(m.va), m.size, PROT_NONE, MAP_SHARED | MAP_FIXED, m.phys->fd,
                 static_cast<off_t>(m.phys->fd_offset + m.offset));
  if (p == MAP_FAILED) return false;
  ask_for_huge_pages(p, m.size);
  return true;
}

CUresult AddressSpace::unmap(uint64_t va, uint64_t size) {
  if (!aligned_to(va, kGranularity) || size == 0 || !aligned_to(size, kGranularity))
    return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mu_);
  Reservation* r = reservation_of(va);
  if (!r || r->origin != Origin::kReserve || va + size > r->base + r->size) return CUDA_ERROR_INVALID_VALUE;
  // The range must be made of whole mappings, with no hole.
  uint64_t cursor = va;
  auto it = r->maps.find(va);
  auto first = it;
  while (cursor < va + size) {
    if (it == r->maps.end() || it->first != cursor || cursor + it->second.size > va + size)
      return CUDA_ERROR_INVALID_VALUE;
    cursor += it->second.size;
    ++it;
  }
  wait_until_unused(va, va + size);
  // Resident memory stays mapped with no access (a ghost, bounded in number);
  // the rest goes back to PROT_NONE anonymous memory.
  constexpr size_t kMaxGhosts = 4096;
  for (auto m = first; m != it; ++m) {
    const Mapping& mp = m->second;
    Ghost g{mp.size, mp.offset, mp.phys, mp.filled.v.load()};
    g.prot = mp.applied_prot;
    const bool keep = mp.phys->resident && ghosts_.size() < kMaxGhosts;
    if (mp.ghost_at != 0) {  // never taken back: still off the VA
      g.at = mp.ghost_at, g.area = mp.ghost_area, g.area_size = mp.ghost_area_size, g.prot = mp.ghost_prot;
      ghosts_[mp.va] = g;
    } else if (keep && move_to_ghost(mp.va, mp.size, &g)) {
      drop_ghosts(mp.va, mp.va + mp.size);  // an older ghost of this VA, moved off it too
      ghosts_[mp.va] = g;
    } else if (keep && mprotect(reinterpret_cast<void*>(mp.va), mp.size, PROT_NONE) == 0) {
      drop_ghosts(mp.va, mp.va + mp.size);
      ghosts_[mp.va] = g;
    } else if (!map_none(mp.va, mp.size)) {
      return CUDA_ERROR_UNKNOWN;
    }
  }
  r->maps.erase(first, it);
  drop_dead_ghosts();
  return CUDA_SUCCESS;
}

CUresult AddressSpace::set_access(uint64_t va, uint64_t size, const CUmemAccessDesc* desc, size_t count) {
  if (!desc || count == 0 || size == 0 || !aligned_to(va, kGranularity) || !aligned_to(size, kGranularity))
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    const CUmemLocation& l = desc[i].location;
    bool ok_loc = l.type == CU_MEM_LOCATION_TYPE_DEVICE ||
                  l.type == CU_MEM_LOCATION_TYPE_HOST ||
                  (l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && l.id >= 0);
    bool ok_flags = desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ||
                    desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ ||
                    desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (l.type == CU_MEM_LOCATION_TYPE_DEVICE && (l.id < 0 || l.id >= state().config.devices))
      return CUDA_ERROR_INVALID_DEVICE;
    if (!ok_loc || !ok_flags) return CUDA_ERROR_INVALID_VALUE;
  }
  std::unique_lock lock(mu_);
  Reservation* r = reservation_of(va);
  if (!r || r->origin != Origin::kReserve || va + size > r->base + r->size) return CUDA_ERROR_INVALID_VALUE;
  // Every byte of the range must be mapped.
  std::vector<Mapping*> covered;
  uint64_t cursor = va;
  auto it = r->maps.upper_bound(va);
  if (it != r->maps.begin()) --it;
  for (; it != r->maps.end() && cursor < va + size; ++it) {
    Mapping& m = it->second;
    if (m.va + m.size <= cursor) continue;
    if (m.va > cursor) return CUDA_ERROR_INVALID_VALUE;
    covered.push_back(&m);
    cursor = m.va + m.size;
  }
  if (cursor < va + size) return CUDA_ERROR_INVALID_VALUE;
  for (Mapping* m : covered) {
    for (size_t i = 0; i < count; ++i) {
      if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE) m->per_device[desc[i].location.id] = desc[i].flags;
      else m->host_access = desc[i].flags;
    }
    m->device_access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    for (CUmemAccess_flags f : m->per_device) m->device_access = std::max(m->device_access, f);  // NONE < READ < READWRITE
    if (!reprotect_locked(*r, *m, false)) return CUDA_ERROR_UNKNOWN;
  }
  return CUDA_SUCCESS;
}

CUresult AddressSpace::get_access(unsigned long long* flags, const CUmemLocation& loc, uint64_t va) {
  std::shared_lock lock(mu_);
  const Reservation* r = reservation_of(va);
  if (!r) return CUDA_ERROR_INVALID_VALUE;
  auto it = r->maps.upper_bound(va);
  if (it == r->maps.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  const Mapping& m = it->second;
  if (va >= m.va + m.size) return CUDA_ERROR_INVALID_VALUE;
  if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (loc.id < 0 || loc.id >= state().config.devices) return CUDA_ERROR_INVALID_DEVICE;
    *flags = r->origin == Origin::kMemAlloc
                 ? ((r->device_mask >> loc.id) & 1 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE)
                 : m.per_device[loc.id];
  } else if (loc.type == CU_MEM_LOCATION_TYPE_HOST || loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
    *flags = m.host_access;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult AddressSpace::mem_alloc(uint64_t size, int device, const void* owner, unsigned device_mask, uint64_t* out) {
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t bytes = round_up(size, kPage);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  CUresult err;
  auto phys = new_phys(bytes, prop, true, &err);
  if (!phys) return err;
  std::unique_lock lock(mu_);
  uint64_t base = 0;
  // Large allocations start on a 2 MiB boundary so that shmem can give them
  // 2 MiB pages (the VA and the offset must agree modulo 2 MiB). The driver
  // promises less (memory "suitably aligned for any kind of variable",
  // cuMemAlloc); nothing in tierrt relies on more.
  const uint64_t alignment = bytes >= kHugePage ? kHugePage : kPage;
  if (CUresult e = alloc_va(bytes + kMemAllocGuard, alignment, 0, &base)) return e;
  void* p = mmap(reinterpret_cast<void*>(base), bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) {
    free_va(base, bytes + kMemAllocGuard);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ask_for_huge_pages(p, bytes);
  Reservation r;
  r.size = bytes + kMemAllocGuard;
  r.user_size = size;
  r.origin = Origin::kMemAlloc;
  r.device = device;
  r.owner = owner;
  r.device_mask = device_mask;
  place_whole_locked(base, bytes, std::move(r), std::move(phys));
  *out = base;
  return CUDA_SUCCESS;
}

void AddressSpace::place_whole_locked(uint64_t base, uint64_t bytes, Reservation r, std::shared_ptr<PhysAlloc> phys) {
  r.base = base;
  r.buffer_id = next_buffer_id_++;
  Mapping m;
  m.va = base;
  m.size = bytes;
  m.phys = std::move(phys);
  m.device_access = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  m.host_access = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  m.applied_prot = PROT_READ | PROT_WRITE;
  r.maps.emplace(base, std::move(m));
  Reservation& placed = reservations_.emplace(base, std::move(r)).first->second;
  // A kernel of a device without access may be running now.
  reprotect_locked(placed, placed.maps.begin()->second, false);
}

CUresult AddressSpace::mem_free(uint64_t base) {
  std::unique_lock lock(mu_);
  auto it = reservations_.find(base);
  if (it == reservations_.end() || it->second.origin != Origin::kMemAlloc) return CUDA_ERROR_INVALID_VALUE;
  uint64_t size = it->second.size;
  wait_until_unused(base, base + size);
  if (!map_none(base, size)) return CUDA_ERROR_UNKNOWN;
  reservations_.erase(it);
  free_va(base, size);
  return CUDA_SUCCESS;
}

CUresult AddressSpace::host_alloc(uint64_t size, unsigned flags, void** out) {
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t bytes = round_up(size, kPage);
  // Page-locked memory is resident from the start: faulted in here (or
  // recycled), not under the first copy.
  bool resident = false;
  void* p = phys_pool().take_host(bytes, &resident);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::unique_lock lock(mu_);
  uint64_t b = reinterpret_cast<uint64_t>(p);
  host_ranges_[b] = HostRange{b, bytes, flags, true, next_buffer_id_++, resident};
  *out = p;
  return CUDA_SUCCESS;
}

CUresult AddressSpace::host_free(void* p) {
  std::unique_lock lock(mu_);
  auto it = host_ranges_.find(reinterpret_cast<uint64_t>(p));
  if (it == host_ranges_.end() || !it->second.owned) return CUDA_ERROR_INVALID_VALUE;
  uint64_t b = it->second.base, s = it->second.size;
  bool resident = it->second.resident;
  wait_until_unused(b, b + s);
  host_ranges_.erase(it);
  phys_pool().give_host(p, s, resident);
  return CUDA_SUCCESS;
}

CUresult AddressSpace::host_register(void* p, uint64_t size, unsigned flags) {
  uint64_t b = reinterpret_cast<uint64_t>(p);
  if (!p || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (in_arena(b)) return CUDA_ERROR_INVALID_VALUE;
  std::unique_lock lock(mu_);
  auto it = host_ranges_.lower_bound(b);
  if (it != host_ranges_.end() && it->first < b + size) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (host_range_of(b)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  host_ranges_[b] = HostRange{b, size, flags, false, next_buffer_id_++};
  return CUDA_SUCCESS;
}

CUresult AddressSpace::host_unregister(void* p) {
  std::unique_lock lock(mu_);
  auto it = host_ranges_.find(reinterpret_cast<uint64_t>(p));
  if (it == host_ranges_.end() || it->second.owned) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  uint64_t b = it->second.base, s = it->second.size;
  wait_until_unused(b, b + s);
  host_ranges_.erase(it);
  return CUDA_SUCCESS;
}

Resolved AddressSpace::resolve(uint64_t p) const {
  Resolved out;
  std::shared_lock lock(mu_);
  if (in_arena(p)) {
    out.kind = Resolved::kDeviceUnbacked;
    const Reservation* r = reservation_of(p);
    if (!r) return out;
    auto it = r->maps.upper_bound(p);
    if (it == r->maps.begin()) return out;
    --it;
    const Mapping& m = it->second;
    if (p >= m.va + m.size) return out;
    out.kind = Resolved::kDeviceMapped;
    out.host_backed = m.phys->on_host;
    out.buffer_id = r->buffer_id;
    if (r->origin == Origin::kMemAlloc) {
      out.range_base = r->base;
      out.range_size = r->user_size;
    } else {
      out.range_base = m.va;
      out.range_size = m.size;
    }
    return out;
  }
  if (const HostRange* h = host_range_of(p)) {
    out.kind = Resolved::kPinnedHost;
    out.range_base = h->base;
    out.range_size = h->size;
    out.buffer_id = h->buffer_id;
  }
  return out;
}

CUresult AddressSpace::check_access_locked(const Access& a, std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                                           std::vector<std::pair<uint64_t, uint64_t>>* fill, bool* hidden) const {
  if (!in_arena(a.ptr)) {
    // Host memory: pinned or pageable, the work may touch it as it is.
    if (a.bytes) ranges.emplace_back(a.ptr, a.ptr + a.bytes);
    return CUDA_SUCCESS;
  }
  uint64_t cursor = a.ptr, end = a.ptr + std::max<uint64_t>(a.bytes, 1);
  while (cursor < end) {
    const Reservation* r = reservation_of(cursor);
    if (!r) return CUDA_ERROR_ILLEGAL_ADDRESS;
    auto it = r->maps.upper_bound(cursor);
    if (it == r->maps.begin()) return CUDA_ERROR_ILLEGAL_ADDRESS;
    --it;
    const Mapping& m = it->second;
    if (cursor >= m.va + m.size) return CUDA_ERROR_ILLEGAL_ADDRESS;
    bool ok = a.write ? m.device_access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                      : m.device_access != CU_MEM_ACCESS_FLAGS_PROT_NONE;
    if (!ok) return CUDA_ERROR_ILLEGAL_ADDRESS;
    if (hidden && m.applied_prot != prot_in_view(*r, m, -1)) {
      *hidden = true;
      return CUDA_SUCCESS;
    }
    const uint64_t stop = std::min(end, m.va + m.size);
    ranges.emplace_back(cursor, stop);
    // Only what the access touches: a small copy into a large mapping fills
    // no more than it would have faulted in. The whole mapping once filled
    // is never filled again.
    if (fill && m.phys->resident && !m.filled.v.load()) {
      fill->emplace_back(cursor / kPage * kPage, stop);
      if (cursor == m.va && stop == m.va + m.size) m.filled.v.store(true);
    }
    cursor = m.va + m.size;
  }
  return CUDA_SUCCESS;
}

bool AddressSpace::mapped(const Access& a) const {
  std::shared_lock lock(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  return check_access_locked(a, ranges) == CUDA_SUCCESS;
}

void AddressSpace::fill_page_tables(uint64_t begin, uint64_t end) {
  // Read faults in bulk: shmem maps its pages writable where the mapping is
  // (no dirty tracking), so writes then take no fault either. Kernels before
  // 5.14 answer EINVAL, and the copy faults its pages in as before.
  (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ);
}

CUresult AddressSpace::begin_use(const Access* accesses, size_t n, uint64_t* token,
                                 std::vector<std::pair<uint64_t, uint64_t>>* fill) {
  for (;;) {
    ActiveUse use;
    bool hidden = false;
    {
      std::shared_lock lock(mu_);
      for (size_t i = 0; i < n && !hidden; ++i)
        if (CUresult e = check_access_locked(accesses[i], use.ranges, fill, &hidden)) {
          if (state().config.report_faults)
            std::fprintf(stderr, "simdev: a copy %s [0x%llx, 0x%llx), which is not mapped for it\n",
                         accesses[i].write ? "wrote" : "read", static_cast<unsigned long long>(accesses[i].ptr),
                         static_cast<unsigned long long>(accesses[i].ptr + accesses[i].bytes));
          return e;
        }
      if (!hidden) {
        std::lock_guard ulock(use_mu_);
        use.token = next_token_++;
        *token = use.token;
        active_.push_back(std::move(use));
        return CUDA_SUCCESS;
      }
    }
    // A device's kernels are running with this memory hidden from them.
    if (fill) fill->clear();
    restore_copy_view();
  }
}

void AddressSpace::end_use(uint64_t token) {
  std::lock_guard ulock(use_mu_);
  auto it = std::find_if(active_.begin(), active_.end(), [&](const ActiveUse& u) { return u.token == token; });
  if (it != active_.end()) active_.erase(it);
  use_cv_.notify_all();
}

void AddressSpace::wait_until_unused(uint64_t begin, uint64_t end, bool poison) {
  std::unique_lock ulock(use_mu_);
  auto busy = [&] {
    for (const ActiveUse& u : active_)
      for (auto [b, e] : u.ranges)
        if (overlaps(b, e, begin, end)) return true;
    return false;
  };
  if (!busy()) return;
  use_cv_.wait(ulock, [&] { return !busy(); });
  if (!poison) return;
  // Memory was taken away from work that was using it: a GPU would fault.
  if (state().config.report_faults)
    std::fprintf(stderr, "simdev: device memory [0x%llx, 0x%llx) was unmapped while work in flight used it\n",
                 static_cast<unsigned long long>(begin), static_cast<unsigned long long>(end));
  raise_sticky_error(CUDA_ERROR_ILLEGAL_ADDRESS);
}

uint64_t AddressSpace::device_used_total() const {
  uint64_t sum = 0;
  for (const auto& used : device_used_) sum += used.load();
  return sum;
}

int AddressSpace::prot_in_view(const Reservation& r, const Mapping& m, int view) const {
  if (view < 0) return prot_of(m.device_access, m.host_access);
  CUmemAccess_flags device = r.origin == Origin::kMemAlloc
                                 ? ((r.device_mask >> view) & 1 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                                                : CU_MEM_ACCESS_FLAGS_PROT_NONE)
                                 : m.per_device[view];
  return prot_of(device, CU_MEM_ACCESS_FLAGS_PROT_NONE);
}

bool AddressSpace::reprotect_locked(const Reservation& r, Mapping& m, bool wait) {
  int want = prot_in_view(r, m, view_);
  if (want == m.applied_prot && m.ghost_at == 0) return true;
  if (m.ghost_at != 0) {
    if (want == PROT_NONE) return true;  // nothing at the VA: no access, as asked
    if (!take_ghost_back(m)) return false;
    if (want == m.applied_prot) return true;
  }
  // A copy still using memory that is about to lose access finishes first.
  if (wait && (m.applied_prot & ~want)) wait_until_unused(m.va, m.va + m.size, false);
  if (mprotect(reinterpret_cast<void*>(m.va), m.size, want) != 0) return false;
  m.applied_prot = want;
  return true;
}

void AddressSpace::apply_view(int view) {
  std::unique_lock lock(mu_);
  if (view_ == view) return;
  view_ = view;
  for (auto& [base, r] : reservations_)
    for (auto& [va, m] : r.maps) reprotect_locked(r, m, true);
}

void AddressSpace::set_memalloc_access(const void* owner, unsigned device_mask) {
  std::unique_lock lock(mu_);
  for (auto& [base, r] : reservations_) {
    if (r.origin != Origin::kMemAlloc || r.owner != owner) continue;
    r.device_mask = device_mask;
    for (auto& [va, m] : r.maps) reprotect_locked(r, m, true);
  }
}

void AddressSpace::enter_device_view(int device) {
  std::unique_lock lock(turn_mu_);
  // Join the running kernels only while nobody waits for another view.
  if (running_ > 0 && !(view_ == device && waiting_ == 0)) {
    ++waiting_;
    turn_cv_.wait(lock, [&] { return running_ == 0; });
    --waiting_;
  }
  apply_view(device);
  ++running_;
}

void AddressSpace::leave_device_view() {
  std::lock_guard lock(turn_mu_);
  if (--running_ == 0) turn_cv_.notify_all();
}

void AddressSpace::restore_copy_view() {
  std::unique_lock lock(turn_mu_);
  if (running_ > 0) {
    ++waiting_;
    turn_cv_.wait(lock, [&] { return running_ == 0; });
    --waiting_;
  }
  apply_view(-1);
}

}  // namespace simdev
