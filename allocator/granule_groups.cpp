// Granule groups: a large allocation tiered per member (block.h, Group).
// One VA range is reserved for the allocation; each member is a Block over
// its part of it, created untouched (nothing mapped, FREED, counted in no
// state) and given a device chunk at its first use. From then on a member
// is an ordinary block to the mover, the use tracker, the rescue and the
// planner. A group is freed whole (it is one application allocation): it is
// parked with its resident members' chunks still mapped, for the next
// allocation of its size (parked_groups.h), or its members' chunks go to
// the spares and its range to the driver.
#include <algorithm>
#include <cassert>
#include <utility>
#include <vector>

#include "parts.h"
#include "driver/driver.h"

namespace tierrt::alloc {

bool Allocator::Parts::grouping() const noexcept {
  return opt.group_bytes != 0 && backing->mode() == SpillMode::Remap;
}

CUresult Allocator::Parts::allocate_group(CUdeviceptr* out, std::size_t bytes) noexcept {
  const std::size_t mapped = arena.round_up(bytes);
  const std::size_t unit = std::max(arena.round_up(opt.group_unit), arena.granularity());
  const std::uint64_t count = (mapped + unit - 1) / unit;
  if (count > UINT32_MAX / 2) return CUDA_ERROR_OUT_OF_MEMORY;
  ParkedGroup reused;
  bool parked_one = false;
  {
    auto l = blocks.lock();
    parked_one = parked.take(bytes, unit, &reused);
  }
  assert(!parked_one || (reused.mapped == mapped && reused.chunks.size() == count));
  CUdeviceptr va = reused.va;
  CUresult r = parked_one ? CUDA_SUCCESS : arena.reserve_address(mapped, &va);
  if (r != CUDA_SUCCESS) return r;
  Group* g = nullptr;
  {
    auto l = blocks.lock();
    g = groups.take(static_cast<std::uint32_t>(count), bytes, l);
  }
  if (g == nullptr) {
    if (parked_one) release_parked_group(reused);
    else arena.free_address(va, mapped);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g->va = va;
  g->bytes = bytes;
  g->mapped = mapped;
  g->unit = unit;
  Block** members = groups.members(g);
  std::uint32_t made = 0;
  for (; made < count; ++made) {
    Block* b = blocks.new_block();
    const std::size_t off = std::size_t{made} * unit;
    // A parked member's chunk is mapped at its VA already: RESIDENT at once.
    const CUmemGenericAllocationHandle chunk = parked_one ? std::exchange(reused.chunks[made], 0) : 0;
    {
      auto l = blocks.lock();
      b->va = va + off;
      b->mapped = std::min(unit, mapped - off);
      b->size = std::min(unit, bytes - off);  // off < bytes: the last member starts below the end
      b->spillable = true;
      b->group = g;
      b->member = made;
      if (chunk != 0) {
        b->dev = chunk;
        blocks.set_state(b, State::Resident, l);
      } else {
        b->untouched = true;
        untouched_bytes += b->size;
        g->untouched.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (chunk != 0) uses.touch(b);
    members[made] = b;
    if (!arena.table().insert(b->va, b->mapped, reinterpret_cast<std::uintptr_t>(b))) {
      ++made;  // its entries (none) are erased with the rest
      r = CUDA_ERROR_NOT_SUPPORTED;
      break;
    }
  }
  if (r != CUDA_SUCCESS) {
    for (std::uint32_t i = 0; i < made; ++i) destroy_member(members[i]);
    // Chunks of a parked group not handed to a member yet go as well.
    if (parked_one) (void)unmap_parked_chunks(reused, made, /*release=*/false);
    arena.free_address(va, mapped);
    auto l = blocks.lock();
    groups.give(g, l);
    return r;
  }
  {
    auto l = blocks.lock();
    ++live_groups;
  }
  blocks_made.fetch_add(1, std::memory_order_relaxed);
  *out = va;
  return CUDA_SUCCESS;
}

CUresult Allocator::Parts::touch_member(Block* b, std::span<Block* const> pinned, bool host_if_full) noexcept {
  {
    auto l = blocks.lock();
    if (!b->untouched) return CUDA_SUCCESS;  // another thread did it, or the group is being freed
    if (b->remapping) {                      // another thread is mapping it
      blocks.wait_remapped(b, l, pinned);
      return CUDA_SUCCESS;
    }
    b->remapping = true;
  }
  CUresult r;
  CUmemGenericAllocationHandle h = 0;
  {
    // Until the member is RESIDENT a rescue elsewhere waits for it, as for
    // a new block.
    const BlockStates::Claim arriving(blocks);
    // Mapped for a group's first launch, not for its own use: where the
    // device is full it starts on the host, and spills nothing.
    r = arena.obtain_chunk(b->mapped, &h, Claimant{!host_if_full, pinned, !host_if_full, true});
    if (r == CUDA_ERROR_OUT_OF_MEMORY && host_if_full) {
      h = 0;
      if ((r = place_on_host(b)) == CUDA_SUCCESS) {
        uses.touch(b);
        blocks.remap_done();
        return r;
      }
      r = arena.obtain_chunk(b->mapped, &h, Claimant{true, pinned, true, true});
    }
    bool stuck = false;
    if (r == CUDA_SUCCESS && (r = arena.map(b->va, b->mapped, h, nullptr, &stuck)) != CUDA_SUCCESS) {
      if (!stuck) arena.give_chunk(h, b->mapped);  // a chunk still mapped stays there
      h = 0;
    }
    auto l = blocks.lock();
    b->remapping = false;
    if (r == CUDA_SUCCESS) {
      b->dev = h;
      b->untouched = false;
      untouched_bytes -= b->size;
      b->group->untouched.fetch_sub(1, std::memory_order_release);
      blocks.set_state(b, State::Resident, l);
    }
  }
  uses.touch(b);
  blocks.remap_done();
  return r;
}

// A kernel given any address in a group may reach any member: before the
// first launch naming the group runs, every member has memory behind its VA
// (a chunk, or later its host copy), so that no access ever meets an unmapped
// VA. A member the budget has no room for starts on the host (place_on_host):
// nothing is spilled for a member no launch asked for.
CUresult Allocator::Parts::touch_group(Group* g) noexcept {
  Block** members = groups.members(g);
  for (std::uint32_t i = 0;; ++i) {
    Block* b = nullptr;  // looked up under the lock: a free may be clearing the list
    {
      auto l = blocks.lock();
      if (i >= g->count || g->untouched.load(std::memory_order_relaxed) == 0) return CUDA_SUCCESS;
      b = members[i];
    }
    if (b == nullptr || !b->untouched.load(std::memory_order_acquire)) continue;
    if (const CUresult r = touch_member(b, {}, /*host_if_full=*/true); r != CUDA_SUCCESS) return r;
  }
}

// An untouched member the device has no room for, mapped onto a host copy
// as if spilled (its bytes are undefined, as a new allocation's): no copy,
// no spill of anything else. Claimed (Block::remapping) by the caller.
CUresult Allocator::Parts::place_on_host(Block* b) noexcept {
  HostCopy host;
  if (!backing->reserve(*b, &host)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = backing->prepare_spill(b, &host);
  if (r == CUDA_SUCCESS) r = backing->enter_host(b, host);
  auto l = blocks.lock();
  if (r != CUDA_SUCCESS) {
    backing->release(b, &host);
    return r;
  }
  b->remapping = false;
  b->host = host;
  blocks.set_state(b, State::Spilled, l);  // while still untouched: see set_state
  b->untouched = false;
  untouched_bytes -= b->size;
  b->group->untouched.fetch_sub(1, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult Allocator::Parts::free_group(Group* g, CUdeviceptr p) noexcept {
  Block** members = groups.members(g);
  std::uint32_t count = 0;
  {
    auto l = blocks.lock();
    if (g->va != p || g->count == 0) return CUDA_ERROR_INVALID_VALUE;  // an interior pointer, a double free
    count = g->count;
    // Every member FREED, none left moving or being mapped: no launch can
    // make one resident again (a FREED member is named by none).
    for (std::uint32_t i = 0; i < count; ++i) {
      Block* b = members[i];
      for (;;) {
        if (b->remapping) {
          blocks.wait_remapped(b, l, {});
          continue;
        }
        if (b->untouched) {
          b->untouched = false;
          untouched_bytes -= b->size;
          g->untouched.fetch_sub(1, std::memory_order_release);
          break;
        }
        State st = State::Freed;
        if (const CUresult r = settle_for_free(b, l, &st)) return r;  // members before it stay FREED until teardown
        if (b->ops_pending != 0) {  // an aborted spill's copy still reads it
          blocks.wait_moves_of(b, l);
          continue;
        }
        if (st != State::Freed) blocks.set_state(b, State::Freed, l);
        break;
      }
    }
    g->count = 0;  // a second free is refused
    g->record->state.store(State::Freed, std::memory_order_seq_cst);  // a stale launch names nothing
    --live_groups;
  }
  // Work that used a member (on the device, or over the link) ends before its
  // memory goes: the free waits for it, as a free of a spilled block does.
  // A member whose uses cannot be waited for stays, FREED, until teardown,
  // and with it the group's range.
  // The group's uses too (a kernel may have reached any member); if they
  // cannot be waited for, every member stays.
  {
    auto l = blocks.lock();  // every member settled: no fetch of the group is under way
    uses.unref(g->record->ready.exchange(nullptr, std::memory_order_acq_rel));
  }
  if (uses.forget(g->record, /*synchronize=*/true) != CUDA_SUCCESS) return CUDA_SUCCESS;
  bool all = true;
  for (std::uint32_t i = 0; i < count; ++i) all &= uses.forget(members[i], /*synchronize=*/true) == CUDA_SUCCESS;
  // Parked only whole: every use of every member is over.
  ParkedGroup pg;
  pg.va = g->va;
  pg.bytes = g->bytes;
  pg.mapped = g->mapped;
  pg.unit = g->unit;
  bool park = all;
  if (park) {
    try {
      pg.chunks.assign(count, 0);
    } catch (...) {
      park = false;
    }
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    Block* b = members[i];
    if (!all && uses.recorded(b) != 0) continue;  // its uses cannot be waited for: it stays
    // A resident member's chunk stays mapped at its VA (not a spilled
    // member's: its VA is on its host copy, which goes).
    if (park && b->dev != 0 && !b->va_on_host) {
      pg.chunks[i] = std::exchange(b->dev, 0);
      pg.chunk_bytes += b->mapped;
    }
    destroy_member(b);
    members[i] = nullptr;
  }
  if (!all) return CUDA_SUCCESS;
  std::vector<ParkedGroup> evicted;
  {
    auto l = blocks.lock();
    if (park) park = parked.park(pg, &evicted);
    if (park) groups.give(g, l);
  }
  for (ParkedGroup& old : evicted) release_parked_group(old);
  if (park) return CUDA_SUCCESS;
  (void)unmap_parked_chunks(pg, 0, /*release=*/false);  // no memory to park it: as if never parked
  arena.free_address(g->va, g->mapped);
  auto l = blocks.lock();
  groups.give(g, l);
  return CUDA_SUCCESS;
}

std::uint64_t Allocator::Parts::release_parked(std::uint64_t bytes) noexcept {
  std::vector<ParkedGroup> out;
  std::uint64_t sum = 0;
  {
    auto l = blocks.lock();
    while (sum < bytes && parked.take_oldest(&out)) sum += out.back().chunk_bytes;
  }
  for (ParkedGroup& pg : out) release_parked_group(pg);
  return sum;
}

void Allocator::Parts::release_parked_group(ParkedGroup& pg) noexcept {
  if (unmap_parked_chunks(pg, 0, /*release=*/true)) arena.free_address(pg.va, pg.mapped);
  pg.chunks.clear();
  pg.chunk_bytes = 0;
}

bool Allocator::Parts::unmap_parked_chunks(ParkedGroup& pg, std::size_t from, bool release) noexcept {
  bool all = true;
  for (std::size_t i = from; i < pg.chunks.size(); ++i) {
    const CUmemGenericAllocationHandle h = std::exchange(pg.chunks[i], 0);
    if (h == 0) continue;
    // A chunk the VA could not be taken off stays mapped there, with the range.
    if (DeviceArena::unmap(pg.va + i * pg.unit, pg.member_bytes(i)) != CUDA_SUCCESS) {
      all = false;
      continue;
    }
    if (release) arena.release_chunk(h, pg.member_bytes(i));
    else arena.give_chunk(h, pg.member_bytes(i));
  }
  return all;
}

void Allocator::Parts::destroy_member(Block* b) noexcept {
  assert(b->ops_pending == 0);
  assert(b->no_uses());
  assert(b->ready.load() == nullptr);
  backing->destroy(b);
  arena.table().erase(b->va, b->mapped);
  // A chunk the VA could not be taken off stays mapped there, never reused.
  if (b->dev != 0 && DeviceArena::unmap(b->va, b->mapped) == CUDA_SUCCESS) arena.give_chunk(b->dev, b->mapped);
  b->dev = 0;
  blocks.recycle(b);
}

}  // namespace tierrt::alloc
