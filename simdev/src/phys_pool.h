// Physical memory kept resident. A GPU's memory is always resident: a copy
// into memory just created runs at the link's rate, with no first-touch cost.
// Fresh host pages are not: each is faulted in (allocated, zeroed, mapped)
// the first time it is touched, and a copy into them spends most of its time
// in the kernel rather than at the modeled rate. So physical allocations
// (cuMemCreate's memory, cuMemHostAlloc's pages) are faulted in when they
// are made, and kept for the next allocation of the same size when released
// instead of being handed back to the kernel.
//
// A cuMemCreate handle's memory is a range of one shared memfd
// (carved_memory.h) until it is exported.
//
// Bounded by SIMDEV_RESIDENT: the bytes resident at once, live or pooled.
// Pooled memory is evicted (oldest first) to make room; an allocation that
// still does not fit is made as before, faulted in on first touch, so a test
// with a large SIMDEV_MEM that allocates much and touches little does not
// commit it all.
//
// Recycled memory holds whatever it last held (the driver promises no
// contents for new allocations either); pooled host allocations are PROT_NONE
// until handed out again, so a use after cuMemFreeHost still faults.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>

namespace simdev {

// Where a physical allocation's bytes are: `size` bytes of `fd` from `offset`.
struct PhysMemory {
  int fd = -1;
  uint64_t offset = 0;
  bool carved = false;    // a range of the shared memfd, else a memfd of its own
  bool resident = false;  // its pages are allocated (recycled or faulted in when taken)
};

class PhysPool {
 public:
  void set_limit(uint64_t bytes);

  // Memory for a physical allocation of `size` bytes: a range of the shared
  // memfd, or a memfd of its own where the shared one cannot hold it (a
  // size not a multiple of 2 MiB). False on failure.
  bool take_memory(uint64_t size, PhysMemory* out);
  // Memory of take_memory's that no mapping refers to any more. A memfd of
  // its own is closed, never handed out again: another process may map it.
  void give_memory(const PhysMemory& m, uint64_t size);

  // Private anonymous read-write memory of `size` bytes (a multiple of the
  // page), populated when `*resident`. Null on failure.
  void* take_host(uint64_t size, bool* resident);
  // Memory of take_host's that nothing uses any more.
  void give_host(void* p, uint64_t size, bool resident);

 private:
  struct Entry {
    int fd = -1;  // the shared memfd, its range from `offset`, or
    uint64_t offset = 0;
    void* host = nullptr;  // a host mapping
    uint64_t size = 0;
  };
  // Faults in the pages of a fresh range or memfd; false where it could not.
  static bool populate_fd(int fd, uint64_t offset, uint64_t size);
  // Hands memory back to the kernel.
  static void release(const PhysMemory& m, uint64_t size);
  // Makes room for `size` more resident bytes by evicting pooled entries;
  // false if the limit leaves none. Caller holds mu_.
  bool make_room(uint64_t size);
  static void destroy(const Entry& e);

  std::mutex mu_;
  uint64_t limit_ = 0;
  uint64_t resident_ = 0;  // live resident allocations and pooled ones
  std::list<Entry> pool_;  // oldest first
};

// The process's pool, bounded by SIMDEV_RESIDENT.
PhysPool& phys_pool();

}  // namespace simdev
