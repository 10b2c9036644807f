#include "carved_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cassert>

#include "huge_pages.h"

namespace simdev {

namespace {

// The file's size: sparse, so only the pages of live ranges cost memory.
// Far more than any SIMDEV_MEM a host could back.
constexpr uint64_t kFileBytes = uint64_t{1} << 42;

}  // namespace

CarvedMemory& carved_memory() {
  static CarvedMemory* m = new CarvedMemory;  // never destroyed: mappings may outlive static destructors
  return *m;
}

bool CarvedMemory::take(uint64_t size, int* fd, uint64_t* offset) {
  if (size == 0 || size % kHugePage != 0) return false;
  std::lock_guard lock(mu_);
  if (fd_.load(std::memory_order_relaxed) < 0) {
    if (failed_) return false;
    int fd = memfd_create("simdev-carved", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(kFileBytes)) != 0) {
      close(fd);
      fd = -1;
    }
    if (fd < 0) {
      failed_ = true;
      return false;
    }
    fd_.store(fd, std::memory_order_release);
  }
  // The lowest released range that holds it: the file stays compact, and a
  // range taken again sits where its neighbours' mappings can merge with it.
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    *offset = it->first;
    if (it->second > size) free_.emplace(it->first + size, it->second - size);
    free_.erase(it);
    *fd = fd_.load(std::memory_order_relaxed);
    return true;
  }
  if (end_ + size > kFileBytes) return false;
  *offset = end_;
  end_ += size;
  *fd = fd_.load(std::memory_order_relaxed);
  return true;
}

void CarvedMemory::give(uint64_t offset, uint64_t size) {
  // Its pages go back to the kernel before anyone can be handed the range:
  // the next owner reads zeroes, never this one's bytes, and the memory is
  // not held while nothing uses it. Outside the lock: the range is ours.
  (void)fallocate(fd_.load(std::memory_order_acquire), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(offset), static_cast<off_t>(size));
  std::lock_guard lock(mu_);
  assert(offset + size <= end_);
  auto next = free_.lower_bound(offset);
  assert(next == free_.end() || next->first >= offset + size);
  if (next != free_.end() && next->first == offset + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    assert(prev->first + prev->second <= offset);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  if (offset + size == end_) {
    end_ = offset;  // the top of the file: handed out again in order
    return;
  }
  free_.emplace(offset, size);
}

}  // namespace simdev
