// Physical memory kept resident. A GPU's memory is always resident: a copy
// into memory just created runs at the link's rate, with no first-touch cost.
// Fresh host pages are not: each is faulted in (allocated, zeroed, mapped)
// the first time it is touched, and a copy into them spends most of its time
// in the kernel rather than at the modeled rate. So physical allocations
// (cuMemCreate's memfds, cuMemHostAlloc's pages) are faulted in when they
// are made, and kept for the next allocation of the same size when released
// instead of being handed back to the kernel.
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

class PhysPool {
 public:
  void set_limit(uint64_t bytes);

  // A memfd of `size` bytes; `*resident`: its pages are allocated (recycled
  // or faulted in now), to be given back with give_fd(). -1 on failure.
  int take_fd(uint64_t size, bool* resident);
  // A memfd of take_fd's that no mapping refers to any more.
  void give_fd(int fd, uint64_t size, bool resident);

  // Private anonymous read-write memory of `size` bytes (a multiple of the
  // page), populated when `*resident`. Null on failure.
  void* take_host(uint64_t size, bool* resident);
  // Memory of take_host's that nothing uses any more.
  void give_host(void* p, uint64_t size, bool resident);

 private:
  struct Entry {
    int fd = -1;          // a memfd, or
    void* host = nullptr;  // a host mapping
    uint64_t size = 0;
  };
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
