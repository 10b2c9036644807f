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
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>

#include "allocator/block.h"
#include "asymmetric_fence.h"

namespace tierrt::alloc {

namespace announcement_detail {

// seq: even while idle, odd while a launch is announced. Everything atomic:
// takers read slots while their threads write them.
struct alignas(64) Slot {
  std::atomic<std::uint64_t> seq{0};
  std::atomic<std::uint32_t> count{0};
  std::atomic<bool> taken{false};
  std::atomic<const Block*> blocks[8] = {};
};

// The calling thread's slot, read at every launch (begin and end):
// initial-exec, as a thread-local in libtierrt.so is otherwise reached
// through a call to __tls_get_addr at each access (1.4 ns more per access
// than this one load, in a loop on a 2.1 GHz EPYC VM; the library's TLS is
// static already: its dynamic FLAGS say STATIC_TLS). constinit: no
// initialisation wrapper is called where it is read.
extern constinit __attribute__((tls_model("initial-exec"))) thread_local Slot* t_slot;
// Claimed, or found none: not tried again.
extern constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_claimed_once;
// Claims a free slot for the calling thread (once); null when none is free.
Slot* claim() noexcept;

}  // namespace announcement_detail

class LaunchAnnouncements {
 public:
  static constexpr std::size_t kBlocks = 8;    // a launch naming more pins
  static constexpr std::size_t kSlots = 256;   // threads past that pin

  // Launching thread. begin: false (nothing announced) when the launch names
  // more than kBlocks, the thread found no free slot, or it announced a
  // launch already (nested engines). end: after the use was recorded.
  static bool begin(std::span<Block* const> blocks) noexcept {
    using namespace announcement_detail;
    if (blocks.size() > kBlocks) return false;
    Slot* s = t_slot;
    if (s == nullptr && (t_claimed_once || (s = claim()) == nullptr)) return false;
    const std::uint64_t seq = s->seq.load(std::memory_order_relaxed);
    if (seq & 1) return false;  // this thread announced a launch already
    // Release: a taker that reads a block written here also sees the uses the
    // thread's earlier launches recorded (their ends come before).
    for (std::size_t i = 0; i < blocks.size(); ++i) s->blocks[i].store(blocks[i], std::memory_order_release);
    s->count.store(static_cast<std::uint32_t>(blocks.size()), std::memory_order_relaxed);
    // Ordered before the caller looks at the blocks' states; the taker's side
    // of the barrier is in announced() (asymmetric_fence.h).
    asymmetric_fence::light_store(s->seq, seq + 1);
    return true;
  }
  static void end() noexcept {
    announcement_detail::Slot* s = announcement_detail::t_slot;
    assert(s != nullptr && (s->seq.load(std::memory_order_relaxed) & 1) == 1);
    // A rescue waiting for launches to let go is told after this
    // (BlockStates::pins_released: store, then look; the rescue's side of the
    // barrier is in for_each_announced).
    asymmetric_fence::light_store(s->seq, s->seq.load(std::memory_order_relaxed) + 1);
  }

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

static_assert(std::size(announcement_detail::Slot{}.blocks) == LaunchAnnouncements::kBlocks);

// A launch being enqueued holds the block: pinned, or announced.
inline bool held_by_launch(const Block* b) noexcept {
  return b->pins.load(std::memory_order_seq_cst) != 0 || LaunchAnnouncements::announced(b);
}

}  // namespace tierrt::alloc
