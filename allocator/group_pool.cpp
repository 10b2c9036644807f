#include "group_pool.h"

#include <cassert>
#include <cstddef>
#include <new>

namespace tierrt::alloc {

Group* GroupPool::take(std::uint32_t count, std::size_t bytes, const BlockStates::Lock&) noexcept {
  Slot* s = nullptr;
  for (Slot& c : slots_)
    if (!c.live && c.last_bytes == bytes && c.capacity >= count) s = &c;
  const bool learned = s != nullptr;
  for (Slot& c : slots_)
    if (!learned && !c.live && c.capacity >= count && (s == nullptr || c.capacity < s->capacity)) s = &c;
  if (s == nullptr) {
    // A new slot rather than bigger arrays for a free one: the arrays of a
    // slot are never replaced, so a stale reader never reads freed memory.
    // Built in place: a Slot holds atomics and list hooks, and a deque
    // never moves its elements.
    try {
      const std::size_t words = (2 * std::size_t{count} + 63) / 64;
      std::unique_ptr<std::atomic<std::uint64_t>[]> bits(new std::atomic<std::uint64_t>[words]);
      std::unique_ptr<std::atomic<std::uint64_t>[]> previous(new std::atomic<std::uint64_t>[words]);
      std::unique_ptr<Block*[]> members(new Block*[count]);
      s = &slots_.emplace_back();
      s->bits = std::move(bits);
      s->previous_bits = std::move(previous);
      s->members = std::move(members);
      s->capacity = count;
      s->record.slab = true;
      s->record.spillable = false;
      s->group.record = &s->record;
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }
  const std::size_t words = (2 * std::size_t{s->capacity} + 63) / 64;
  if (!learned)
    for (std::size_t i = 0; i < words; ++i) {
      s->bits[i].store(0, std::memory_order_relaxed);
      s->previous_bits[i].store(0, std::memory_order_relaxed);
    }
  s->last_bytes = bytes;
  for (std::uint32_t i = 0; i < s->capacity; ++i) s->members[i] = nullptr;
  s->group.boundaries = s->bits.get();
  s->group.previous = s->previous_bits.get();
  s->group.count = count;
  s->group.untouched.store(0, std::memory_order_relaxed);
  s->group.fence.store(0, std::memory_order_relaxed);
  // A use record is resident for as long as its group lives: launches pin it.
  assert(s->record.no_uses() && s->record.pins.load() == 0);
  s->record.group = &s->group;
  s->record.captured = false;
  s->record.ready.store(nullptr, std::memory_order_relaxed);
  s->record.state.store(State::Resident, std::memory_order_seq_cst);
  s->live = true;
  return &s->group;
}

void GroupPool::new_step(const BlockStates::Lock&) noexcept {
  for (Slot& s : slots_)
    if (s.group.previous != nullptr) s.group.new_step((2 * std::size_t{s.capacity} + 63) / 64);
}

void GroupPool::give(Group* g, const BlockStates::Lock&) noexcept {
  Slot& s = slot_of(g);
  assert(g->fence.load() == 0);
  s.live = false;
  s.record.state.store(State::Freed, std::memory_order_seq_cst);
  g->va = 0;
  g->bytes = g->mapped = g->unit = 0;
}

}  // namespace tierrt::alloc
