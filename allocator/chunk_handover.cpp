// Freed memory handed to a fetch in stream order (ChunkDonors, mover.h).
//
// In a backward pass the application frees each activation right after
// enqueueing the kernel that reads it, far ahead of the device. A fetch that
// needs memory then finds it in the cache, but still in use; a rescue would
// have the host wait until the device caught up (the trim). Instead the
// fetch takes a cached block's chunk as it is: it maps the chunk at its own
// VA too (a chunk may be mapped at several addresses), its copy stream waits
// on the device for the freed block's uses, and once the copy completed,
// which implies those uses did, the freed block's VA goes. The chunk never
// leaves the budget, and nothing waits on the host.
#include "launch_announcements.h"
#include "parts.h"

namespace tierrt::alloc {

bool Allocator::Parts::donate(std::size_t bytes, CUstream waiter, CUmemGenericAllocationHandle* chunk,
                              Block** donor) noexcept {
  UseSlot waits[kMaxUses];
  int nwaits = 0;
  Block* d = nullptr;
  {
    auto l = blocks.lock();
    // A launch that pinned (or announced) it before it was freed may still be enqueuing
    // and record its use after this: such a block is passed over. Freed,
    // it takes no new pin. One freed inside a capture waits for its graph.
    d = blocks.take_donor(
        bytes,
        [](const Block* c) {
          return c->ops_pending == 0 && c->ready.load() == nullptr && !c->captured && !held_by_launch(c);
        },
        l);
    if (d == nullptr) return false;
    nwaits = uses.take_refs_owned(d, waits, nullptr);
  }
  const CUresult r =
      nwaits == 0 ? CUDA_SUCCESS : uses.wait_then_unref(waiter, {waits, static_cast<std::size_t>(nwaits)});
  if (r != CUDA_SUCCESS) {
    auto l = blocks.lock();
    blocks.return_donor(d, l);
    return false;
  }
  *chunk = d->dev;
  d->dev = 0;  // the fetch's now: the donor's teardown must not release it
  *donor = d;
  return true;
}

void Allocator::Parts::take_back(Block* donor, CUmemGenericAllocationHandle chunk) noexcept {
  auto l = blocks.lock();
  donor->dev = chunk;
  blocks.return_donor(donor, l);
}

void Allocator::Parts::retire(Block* donor) noexcept {
  (void)uses.forget(donor, /*synchronize=*/false);  // completed before the copy did
  // A VA that could not be unmapped stays on the chunk, never reused.
  if (DeviceArena::unmap(donor->va, donor->mapped) != CUDA_SUCCESS) return;
  destroy_block(donor);  // its VA and record; dev is 0, so not the chunk
}

}  // namespace tierrt::alloc
