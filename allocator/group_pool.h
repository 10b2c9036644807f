// The Group objects of granule groups (block.h), type-stable: a group freed
// goes back here, never to the heap, because a launch may still read a stale
// member's group pointer. Each holds its boundary bits and the list of its
// members, sized for the largest count it served. Guarded by alloc.blocks.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>

#include "allocator/block.h"
#include "block_states.h"

namespace tierrt::alloc {

class GroupPool {
 public:
  // A group with room for `count` members, or null (no memory for it). The
  // boundaries a freed group of the same `bytes` learned are kept: a program
  // that allocates its step's temporaries anew each step (XLA) lays them out
  // the same way each time, and a new group would otherwise start its step
  // with every extent at the cap. Other groups start with none.
  Group* take(std::uint32_t count, std::size_t bytes, const BlockStates::Lock&) noexcept;
  void give(Group* g, const BlockStates::Lock&) noexcept;
  // A step ended: every group's boundaries, live or kept for the next group
  // of its size, start the next step afresh (Group::new_step).
  void new_step(const BlockStates::Lock&) noexcept;
  // Group g's member list (count entries).
  Block** members(Group* g) noexcept { return slot_of(g).members.get(); }
  // Every group taken and not given back (shutdown: their ranges are freed).
  template <class F>
  void for_each_live(F&& f) {
    for (Slot& s : slots_)
      if (s.live) f(&s.group);
  }

 private:
  struct Slot {
    Group group;  // first: a Group* is its Slot*
    Block record;  // the group's use record (Group::record)
    std::unique_ptr<std::atomic<std::uint64_t>[]> bits, previous_bits;
    std::unique_ptr<Block*[]> members;
    std::uint32_t capacity = 0;
    std::size_t last_bytes = 0;  // of the group it last served
    bool live = false;
  };
  static Slot& slot_of(Group* g) noexcept { return *reinterpret_cast<Slot*>(g); }
  std::deque<Slot> slots_;
};

}  // namespace tierrt::alloc
