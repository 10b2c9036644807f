// 2 MiB pages for simdev's memory, where the kernel gives them.
//
// A GPU maps device memory with 2 MiB pages and builds its page tables when
// the memory is mapped: a kernel or copy into memory just mapped runs at
// full speed. simdev's memory is host memory at the same VA, and Linux maps
// it 4 KiB at a time on first access. On bare metal that is cheap; under
// shadow paging (some VMs' nested page tables) every first
// access of a 4 KiB page at a new mapping traps to the hypervisor, several
// µs each, and that cost would land inside a modeled copy or kernel (an
// 8 MiB copy into a fresh mapping: ~20 ms instead of 0.5). With 2 MiB pages
// it is one trap per 2 MiB, as on the GPU.
//
// Linux gives them to private anonymous memory when transparent huge pages
// are "always" or "madvise", and to memfds and shared anonymous memory when
// /sys/kernel/mm/transparent_hugepage/shmem_enabled is "always", "advise" or
// "within_size" ("never" on some distributions' kernels). Elsewhere the
// request is a no-op and pages stay 4 KiB.
#pragma once

#include <sys/mman.h>

#include <cstdint>

namespace simdev {

constexpr uint64_t kHugePage = uint64_t{2} << 20;

inline void ask_for_huge_pages(void* p, uint64_t size) {
  // Best effort: EINVAL on kernels without THP changes nothing.
  (void)madvise(p, size, MADV_HUGEPAGE);
}

// A read-write shared mapping of `size` bytes of `fd` from `offset` (a
// multiple of kHugePage) at an address aligned to kHugePage (shmem hands out
// a huge page only where the VA and the file offset agree modulo 2 MiB),
// asking for huge pages. MAP_FAILED on failure.
inline void* map_shared_huge(int fd, uint64_t size, uint64_t offset = 0) {
  void* area = mmap(nullptr, size + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (area == MAP_FAILED) return MAP_FAILED;
  const auto base = reinterpret_cast<uint64_t>(area);
  const uint64_t at = (base + kHugePage - 1) & ~(kHugePage - 1);
  void* p = mmap(reinterpret_cast<void*>(at), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                 static_cast<off_t>(offset));
  if (at > base) munmap(area, at - base);
  if (const uint64_t tail = base + size + kHugePage - (at + size); tail != 0)
    munmap(reinterpret_cast<void*>(at + size), tail);
  if (p == MAP_FAILED) {
    munmap(reinterpret_cast<void*>(at), size);
    return MAP_FAILED;
  }
  ask_for_huge_pages(p, size);
  return p;
}

}  // namespace simdev
