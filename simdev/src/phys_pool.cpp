#include "phys_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

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

void PhysPool::destroy(const Entry& e) {
  if (e.fd >= 0) close(e.fd);
  if (e.host != nullptr) munmap(e.host, e.size);
}

bool PhysPool::make_room(uint64_t size) {
  while (resident_ + size > limit_ && !pool_.empty()) {
    const Entry e = pool_.front();
    pool_.pop_front();
    resident_ -= e.size;
    destroy(e);  // under the lock: close and munmap do not block on simdev
  }
  if (resident_ + size > limit_) return false;
  resident_ += size;
  return true;
}

int PhysPool::take_fd(uint64_t size, bool* resident) {
  *resident = false;
  bool room = false;
  {
    std::lock_guard lock(mu_);
    // The most recently pooled memfd of this size: its pages are likeliest
    // still in the caches.
    for (auto it = pool_.rbegin(); it != pool_.rend(); ++it) {
      if (it->fd < 0 || it->size != size) continue;
      const int fd = it->fd;
      pool_.erase(std::next(it).base());
      *resident = true;
      return fd;
    }
    room = make_room(size);
  }
  const int fd = memfd_create("simdev-physical", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    if (room) {
      std::lock_guard lock(mu_);
      resident_ -= size;
    }
    return -1;
  }
  if (room) {
    // Its pages are allocated here: as 2 MiB pages where shmem gives them.
    void* p = map_shared_huge(fd, size);
    if (p != MAP_FAILED) {
      populate(p, size);
      munmap(p, size);  // the pages stay with the memfd
      *resident = true;
    } else {
      std::lock_guard lock(mu_);
      resident_ -= size;
    }
  }
  return fd;
}

void PhysPool::give_fd(int fd, uint64_t size, bool resident) {
  if (!resident) {
    if (fd >= 0) close(fd);
    return;
  }
  std::lock_guard lock(mu_);
  if (fd < 0 || resident_ > limit_) {  // the limit shrank: hand it back
    resident_ -= size;
    if (fd >= 0) close(fd);
    return;
  }
  pool_.push_back(Entry{fd, nullptr, size});
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
      pool_.push_back(Entry{-1, p, size});
      return;
    }
    resident_ -= size;
  }
  munmap(p, size);
}

}  // namespace simdev
