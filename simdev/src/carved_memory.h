// cuMemCreate's physical allocations share one sparse memfd, each a range
// of it, instead of a memfd apiece (the resident pool, phys_pool.h, keeps
// released ranges with their pages for the next allocation of their size,
// and hands them back here when it evicts them). The driver hands out as
// many allocations as device memory holds and costs no file descriptor for
// any of them; a memfd per allocation would stop a job at the process's fd
// limit (often 1024 or 20000) and, with a mapping apiece, at the kernel's
// vm.max_map_count (65530), long before SIMDEV_MEM ran out. Ranges are
// carved in order, so allocations mapped side by side at increasing VAs
// map neighbouring ranges of one file and Linux merges their mappings.
//
// A range is 2 MiB-aligned in the file (shmem gives a 2 MiB page only where
// the VA and the file offset agree modulo 2 MiB) and holds zeroes when
// carved: a range given back here has its pages returned to the kernel (a
// hole punched) before it is handed out again.
//
// A handle that is exported moves to a memfd of its own first
// (address_space_ipc.cpp): the shared memfd's fd would give the other
// process every other allocation's bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

namespace simdev {

class CarvedMemory {
 public:
  // A range of `size` bytes (a multiple of 2 MiB): the shared memfd and the
  // range's offset in it. False when none is left or the memfd cannot be
  // made; the caller then makes a memfd of its own.
  bool take(uint64_t size, int* fd, uint64_t* offset);
  // A range of take's that no mapping refers to any more.
  void give(uint64_t offset, uint64_t size);

 private:
  std::mutex mu_;
  // Made at the first take (under mu_), never closed: mappings outlive
  // everything. Atomic: give() reads it without the lock.
  std::atomic<int> fd_{-1};
  bool failed_ = false;  // memfd_create or ftruncate refused: never tried again
  uint64_t end_ = 0;  // ranges at or past it were never handed out
  // Released ranges below end_, by offset, neighbours coalesced.
  // Invariant: no two touch, and none reaches end_ (it would have lowered it).
  std::map<uint64_t, uint64_t> free_;
};

// The process's carved memory.
CarvedMemory& carved_memory();

}  // namespace simdev
