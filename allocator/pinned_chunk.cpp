#include "pinned_chunk.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "driver/driver.h"
#include "driver/relaxed_capture_mode.h"
#include "numa_binding.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older C library headers lack it
#endif

namespace tierrt::alloc {

namespace {

// Faults every page in for writing, so that each lands under the node policy
// before the driver locks it (registering keeps pages where they are).
bool fault_in(void* p, std::size_t bytes) {
  if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return true;
  if (errno != EINVAL) return false;  // no memory for the pages
  // A kernel before 5.14: one write per page.
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return false;
  for (std::size_t off = 0; off < bytes; off += static_cast<std::size_t>(page))
    static_cast<volatile char*>(p)[off] = 0;
  return true;
}

// Mapped here, bound to `node`, faulted in and registered; false with
// nothing held when a step fails (*unplaceable: see make_pinned_chunk).
bool make_placed_chunk(std::size_t bytes, int node, PinnedChunk* out, const char** unplaceable) {
  // Private, as malloc'ed memory is: jemalloc keeps its arena's metadata in
  // these chunks, which a forked child must not share.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const int err = numa::prefer_node(p, bytes, node);
  if (err != 0) *unplaceable = numa::binding_failure(err);
  // Pages that cannot be faulted in mean no memory, not a node that cannot
  // be used: the next chunk is bound again.
  bool placed = err == 0 && fault_in(p, bytes);
  if (placed && TIERRT_CU(cuMemHostRegister, p, bytes, CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS) {
    *unplaceable = "the driver would not page-lock mapped memory (cuMemHostRegister)";
    placed = false;
  }
  if (!placed) {
    munmap(p, bytes);
    return false;
  }
  std::uint64_t on = bytes;  // where the kernel does not say, the policy held
  (void)numa::bytes_on_node(p, bytes, node, &on);
  *out = PinnedChunk{p, bytes, true, on};
  return true;
}

}  // namespace

CUresult make_pinned_chunk(std::size_t bytes, int node, PinnedChunk* out, const char** unplaceable) noexcept {
  *unplaceable = nullptr;
  const drv::RelaxedCaptureMode relaxed;  // may run on a thread with a capture open
  if (node >= 0 && make_placed_chunk(bytes, node, out, unplaceable)) return CUDA_SUCCESS;
  void* p = nullptr;
  const CUresult r = TIERRT_CU(cuMemHostAlloc, &p, bytes, CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) return r;
  *out = PinnedChunk{p, bytes, false, 0};
  return CUDA_SUCCESS;
}

void free_pinned_chunk(const PinnedChunk& c) noexcept {
  const drv::RelaxedCaptureMode relaxed;
  if (!c.registered) {
    (void)TIERRT_CU(cuMemFreeHost, c.base);
    return;
  }
  // Unmapping memory the driver still has locked would leave it pinned.
  if (TIERRT_CU(cuMemHostUnregister, c.base) == CUDA_SUCCESS) munmap(c.base, c.size);
}

}  // namespace tierrt::alloc
