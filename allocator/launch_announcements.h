// Launches being enqueued, announced rather than pinned. A launch whose
// blocks are all resident takes no pin: its thread writes the blocks into a
// slot of its own and marks the slot active (one store), then looks at
// their states, and marks the slot idle (one more store) once the launch
// went out and its use was recorded. Whoever takes a block
// from under launches (a spill's claim, a trim, a handover, a rescue
// deciding whether to wait) publishes the block's state first and then looks
// at the slots as it looks at pins: an active slot naming the block counts
// as a pin. An 8-block launch's 16 read-modify-writes become two stores.
//
// The pairing is the pins' (pin, then look; publish, then look at pins):
// the launcher's activating store and the taker's state store are both
// sequentially consistent, so either the launcher sees the new state (and
// takes the pinning path) or the taker sees the active slot.
//
// A slot's blocks are written only while it is idle, before it turns
// active, so a taker that found it active reads that launch's blocks or a
// later launch's, in which case the one it found active has ended (no false
// "not announced" for a launch still under way; a false "announced" only
// makes a spill come back busy).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "allocator/block.h"

namespace tierrt::alloc {

class LaunchAnnouncements {
 public:
  static constexpr std::size_t kBlocks = 8;    // a launch naming more pins
  static constexpr std::size_t kSlots = 256;   // threads past that pin

  // Launching thread. begin: false (nothing announced) when the launch names
  // more than kBlocks, the thread found no free slot, or it announced a
  // launch already (nested engines). end: after the use was recorded.
  static bool begin(std::span<Block* const> blocks) noexcept;
  static void end() noexcept;

  // Whether a launch being enqueued now announced `b` (call after
  // publishing what the launch must see: it makes the heavy barrier first,
  // a few microseconds). True, to be safe, where the barrier failed.
  static bool announced(const Block* b) noexcept;

  // Calls fn(block, ctx) for each block an active launch announced, once per
  // slot naming it (pointers only: a block it names may be recycled since,
  // its storage is type-stable). After the heavy barrier, as announced();
  // false (nothing called) where it failed: any launch may be announced.
  static bool for_each_announced(void (*fn)(const Block*, void*), void* ctx) noexcept;

  // Slots threads hold now (tests).
  static std::size_t slots_in_use() noexcept;
};

// A launch being enqueued holds the block: pinned, or announced.
inline bool held_by_launch(const Block* b) noexcept {
  return b->pins.load(std::memory_order_seq_cst) != 0 || LaunchAnnouncements::announced(b);
}

}  // namespace tierrt::alloc
