#include "phys_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "carved_memory.h"
#include "huge_pages.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace simdev {

namespace {

constexpr uint64_t kPage = 4096;

// Faults in every page of a fresh read-write mapping (allocated and zeroed
// now, not under the first copy).
void populate(void* p, uint64_t size) {
  if (madvise(p, size, MADV_POPULATE_WRITE) == 0) return;
  // Kernels before 5.14: touch each page.
  auto* b = static_cast<volatile unsigned char*>(p);
  for (uint64_t off = 0; off < size; off += kPage) b[off] = 0;
}

}  // namespace

PhysPool& phys_pool() {
  static PhysPool* pool = new PhysPool;  // never destroyed: memory may outlive static destructors
  return *pool;
}

void PhysPool::set_limit(uint64_t bytes) {
  std::lock_guard lock(mu_);
  limit_ = bytes;
}

void PhysPool::release(const PhysMemory& m, uint64_t size) {
  if (m.carved) carved_memory().give(m.offset, size);
  else if (m.fd >= 0) close(m.fd);
}

void PhysPool::destroy(const Entry& e) {
  if (e.fd >= 0) release(PhysMemory{e.fd, e.offset, true, true}, e.size);
  if (e.host != nullptr) munmap(e.host, e.size);
}

bool PhysPool::make_room(uint64_t size) {
  while (resident_ + size > limit_ && !pool_.empty()) {
    const Entry e = pool_.front();
    pool_.pop_front();
    resident_ -= e.size;
    destroy(e);  // under the lock: a punched hole or munmap does not block on simdev
  }
  if (resident_ + size > limit_) return false;
  resident_ += size;
  return true;
}

bool PhysPool::populate_fd(int fd, uint64_t offset, uint64_t size) {
  // As 2 MiB pages where shmem gives them.
  void* p = map_shared_huge(fd, size, offset);
  if (p == MAP_FAILED) return false;
  populate(p, size);
  munmap(p, size);  // the pages stay with the memfd
  return true;
}

bool PhysPool::take_memory(uint64_t size, PhysMemory* out) {
  *out = PhysMemory{};
  bool room = false;
  {
    std::lock_guard lock(mu_);
    // The most recently pooled range of this size: its pages are likeliest
    // still in the caches.
    for (auto it = pool_.rbegin(); it != pool_.rend(); ++it) {
      if (it->fd < 0 || it->size != size) continue;
      *out = PhysMemory{it->fd, it->offset, true, true};
      pool_.erase(std::next(it).base());
      return true;
    }
    room = make_room(size);
  }
  out->carved = carved_memory().take(size, &out->fd, &out->offset);
  if (!out->carved) {
    out->fd = memfd_create("simdev-physical", MFD_CLOEXEC);
    if (out->fd >= 0 && ftruncate(out->fd, static_cast<off_t>(size)) != 0) {
      close(out->fd);
      out->fd = -1;
    }
  }
  if (out->fd >= 0 && room) out->resident = populate_fd(out->fd, out->offset, size);
  if (room && !out->resident) {
    std::lock_guard lock(mu_);
    resident_ -= size;
  }
  return out->fd >= 0;
}

void PhysPool::give_memory(const PhysMemory& m, uint64_t size) {
  if (m.resident) {
    std::lock_guard lock(mu_);
    if (m.carved && resident_ <= limit_) {  // else the limit shrank: hand it back
      pool_.push_back(Entry{m.fd, m.offset, nullptr, size});
      return;
    }
    resident_ -= size;
  }
  release(m, size);
}

void* PhysPool::take_host(uint64_t size, bool* resident) {
  *resident = false;
  bool room = false;
  {
    std::lock_guard lock(mu_);
    for (auto it = pool_.rbegin(); it != pool_.rend(); ++it) {
      if (it->host == nullptr || it->size != size) continue;
      void* p = it->host;
      // Still populated: mprotect keeps the pages and their page tables.
      if (mprotect(p, size, PROT_READ | PROT_WRITE) != 0) break;
      pool_.erase(std::next(it).base());
      *resident = true;
      return p;
    }
    room = make_room(size);
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) p = nullptr;
  if (p != nullptr) ask_for_huge_pages(p, size);
  if (p != nullptr && room) {
    populate(p, size);
    *resident = true;
  }
  if (room && !*resident) {
    std::lock_guard lock(mu_);
    resident_ -= size;
  }
  return p;
}

void PhysPool::give_host(void* p, uint64_t size, bool resident) {
  if (resident) {
    std::lock_guard lock(mu_);
    if (resident_ <= limit_ && mprotect(p, size, PROT_NONE) == 0) {
      pool_.push_back(Entry{-1, 0, p, size});
      return;
    }
    resident_ -= size;
  }
  munmap(p, size);
}

}  // namespace simdev
