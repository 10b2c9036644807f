#include "group_pool.h"

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
    try {
      Slot fresh;
      const std::size_t words = (2 * std::size_t{count} + 63) / 64;
      fresh.bits.reset(new std::atomic<std::uint64_t>[words]);
      fresh.members.reset(new Block*[count]);
      fresh.capacity = count;
      s = &slots_.emplace_back(std::move(fresh));
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }
  const std::size_t words = (2 * std::size_t{s->capacity} + 63) / 64;
  if (!learned)
    for (std::size_t i = 0; i < words; ++i) s->bits[i].store(0, std::memory_order_relaxed);
  s->last_bytes = bytes;
  for (std::uint32_t i = 0; i < s->capacity; ++i) s->members[i] = nullptr;
  s->group.boundaries = s->bits.get();
  s->group.count = count;
  s->live = true;
  return &s->group;
}

void GroupPool::give(Group* g, const BlockStates::Lock&) noexcept {
  Slot& s = slot_of(g);
  s.live = false;
  g->va = 0;
  g->bytes = g->mapped = g->unit = 0;
}

}  // namespace tierrt::alloc
