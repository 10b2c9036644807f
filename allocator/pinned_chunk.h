// One chunk of copy mode's pinned pool: page-locked host memory, on a NUMA
// node when one is asked for. cuMemHostAlloc takes no node, so a placed
// chunk is mapped, bound to the node, faulted in there and then page-locked
// with cuMemHostRegister (the pages stay where they were faulted in).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace tierrt::alloc {

struct PinnedChunk {
  void* base = nullptr;
  std::size_t size = 0;
  bool registered = false;      // mapped here and registered, else from cuMemHostAlloc
  std::uint64_t on_node = 0;    // bytes found on the node asked for
};

// A chunk of `bytes` (a multiple of the page size) on `node`, or anywhere
// when node < 0. A chunk that cannot be placed comes from cuMemHostAlloc
// instead; *unplaceable then says why no chunk can be placed here (the
// kernel refused the binding, the driver the registration), or stays null
// when this one only found no memory. CUDA_ERROR_OUT_OF_MEMORY: no chunk.
CUresult make_pinned_chunk(std::size_t bytes, int node, PinnedChunk* out, const char** unplaceable) noexcept;

// Gives a chunk from make_pinned_chunk back (no buffer in it may be in use).
void free_pinned_chunk(const PinnedChunk& c) noexcept;

}  // namespace tierrt::alloc
