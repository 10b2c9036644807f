// A shared library that links the allocator the way libtierrt.so will, for
// the jemalloc privacy test. Exports one function only.
#include <cuda.h>

#include <cstring>
#include <vector>

#include "allocator/allocator.h"

extern "C" __attribute__((visibility("default"))) int tierrt_probe_copy_cycle(void) {
  using namespace tierrt::alloc;
  Options o;
  o.mode = SpillMode::Copy;
  auto a = Allocator::create(o);
  if (!a || a->mode() != SpillMode::Copy) return 1;
  CUdeviceptr p = 0;
  const std::size_t n = 4u << 20;
  if (a->allocate(&p, n, nullptr) != CUDA_SUCCESS) return 2;
  Block* b = a->lookup(p);
  Block* bs[1] = {b};
  if (a->ensure_resident(bs, nullptr) != CUDA_SUCCESS) return 3;
  if (cuMemsetD8(p, 0x5a, n) != CUDA_SUCCESS) return 4;
  a->record_use(bs, nullptr);
  a->release(bs);
  if (a->spill(b) != SpillResult::Started) return 5;
  a->drain();
  if (b->st() != State::Spilled || a->stats().pinned_pool_bytes == 0) return 6;
  std::vector<unsigned char> out(n);
  if (a->ensure_resident(bs, nullptr) != CUDA_SUCCESS) return 7;
  if (cuMemcpyDtoH(out.data(), p, n) != CUDA_SUCCESS) return 8;
  a->release(bs);
  for (unsigned char c : out)
    if (c != 0x5a) return 9;
  if (a->free(p, nullptr) != CUDA_SUCCESS) return 10;
  return 0;
}
