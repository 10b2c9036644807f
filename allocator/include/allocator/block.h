// A Block: one tracked device allocation whose VA never changes while what
// backs it (a device chunk, a host chunk, a pinned buffer) moves.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <boost/intrusive/list_hook.hpp>
#include <boost/intrusive/set_hook.hpp>

namespace tierrt::alloc {

namespace bi = boost::intrusive;

// RESIDENT --spill--> SPILLING --copy done, no use in flight--> SPILLED
// SPILLED --prefetch or demand--> FETCHING --copy done--> RESIDENT
// FETCHING --no device memory / driver error--> SPILLED
// SPILLING --used or freed before the copy completed--> RESIDENT (abort)
// RESIDENT --free--> FREED (kept in the cache) --reuse--> RESIDENT
// SPILLED --free--> FREED (host backing and VA released)
// FREED --an untouched group member placed on the host--> SPILLED
enum class State : std::uint8_t { Resident, Spilling, Spilled, Fetching, Freed };
inline constexpr int kStateCount = 5;

constexpr const char* state_name(State s) noexcept {
  switch (s) {
    case State::Resident: return "RESIDENT";
    case State::Spilling: return "SPILLING";
    case State::Spilled: return "SPILLED";
    case State::Fetching: return "FETCHING";
    case State::Freed: return "FREED";
  }
  return "?";
}

// The state machine above as a table (asserted on every transition).
inline constexpr bool kLegalTransition[kStateCount][kStateCount] = {
    //            to: Resident Spilling Spilled Fetching Freed
    /* Resident */ {false, true, false, false, true},
    /* Spilling */ {true, false, true, false, false},
    /* Spilled  */ {false, false, false, true, true},
    /* Fetching */ {true, false, true, false, false},
    /* Freed    */ {true, false, true, false, false},
};
constexpr bool legal_transition(State from, State to) noexcept {
  return kLegalTransition[static_cast<int>(from)][static_cast<int>(to)];
}

// A pooled CUevent shared by every block a launch named, or by every block
// the launches on one stream named since its last record (an open event:
// UseTracker::record, lazy). Only a recorded event may be waited on or
// queried: the driver treats a never-recorded event as complete.
enum class UsePhase : std::uint8_t {
  Recorded,  // recorded on its stream after every use that names it
  Open,      // not yet recorded: `on`'s next record (UseTracker::settle)
  Failed,    // could not be recorded: its uses are complete once `on` is idle
};
struct UseEvent {
  CUevent ev = nullptr;
  // References: the slots and lazy fields holding it, a stream's open event,
  // callers'. A launch may briefly count one on an event it read as its
  // stream's open one and find it is not (UseTracker::record_lazily_unlocked):
  // so the pool takes an event only at 0 and not already in it (`pooled`),
  // and hands one out with an add, never a store.
  std::atomic<int> refs{0};
  std::atomic<UsePhase> phase{UsePhase::Recorded};
  CUstream on = nullptr;  // the stream an open event will be recorded on (fixed while referenced)
  // Which stream's open event it was and when: the stream's claim serial in
  // the high half, the stream's count of open events in the low half (0:
  // never an open event). Fixed while referenced; read by launches holding
  // a reference, to tell an older open event of their stream from anything
  // else.
  std::atomic<std::uint64_t> stamp{0};
  bool pooled = false;  // in the free list (alloc.uses)
  UseEvent* next_free = nullptr;
};

// Whether `older` is an open event its stream opened before `newer` (both
// stamped by the same claim of one stream; counts compared modulo 2^32, so
// one that wrapped reads as not older: it is kept, never dropped).
constexpr bool opened_before(std::uint64_t older, std::uint64_t newer) noexcept {
  return (older >> 32) == (newer >> 32) && (older >> 32) != 0 &&
         static_cast<std::int32_t>(static_cast<std::uint32_t>(older) - static_cast<std::uint32_t>(newer)) < 0;
}

// The last use of a block on one stream. `ev` is the allocator's
// unrecorded-use marker when no event could be recorded: the use is then
// known complete only once the stream is idle.
struct UseSlot {
  CUstream stream = nullptr;
  UseEvent* ev = nullptr;
  std::uint64_t at = 0;  // the use clock when stored: tells two uses with one marker apart
};

inline constexpr int kMaxUseSlots = 8;
// A block's uses: its slots and its lazy use (Block::lazy).
inline constexpr int kMaxUses = kMaxUseSlots + 1;
inline constexpr std::uint64_t kNeededOnDemand = 1;

// A spilled block's bytes on the host: a host chunk (remap) or a pinned
// buffer (copy), and its share of the host budget.
struct HostCopy {
  CUmemGenericAllocationHandle chunk = 0;
  void* buf = nullptr;
  std::uint64_t bytes = 0;  // its share of the host budget
  // The block's size when its spill was claimed: what the copy holds. Taken
  // under alloc.blocks, because until the copy is enqueued the application
  // may free the block (aborting the spill) and the cache hand it out again
  // with another size; the copy must not follow it past the memory
  // prepared for this one.
  std::uint64_t size = 0;
};

struct Group;

struct alignas(64) Block {
  // The launch path's line: every field a launch reads or writes of each
  // block it names (lookup, residency, use recording), on one cache line
  // (static_assert below): spread over five, an 8-block launch touched up
  // to forty lines.
  CUdeviceptr va = 0;                     // identity (fixed while the block is live)
  std::atomic<UseEvent*> ready{nullptr};  // fetch event consumers must wait on
  // The block's lazy use: the open event (or, once recorded, the event) of
  // the last launch that named it lazily, one reference held; null: none.
  // A use beside its slots, on the event's stream. Launches on that stream
  // re-point it lock-free to their stream's newer open event (a compare and
  // swap: the one given up is older, its stream's later record covers it);
  // a launch on another stream moves it into the slots (under alloc.uses).
  std::atomic<UseEvent*> lazy{nullptr};
  // Last recorded use, allocation or fetch (the use tracker's clock): the
  // rescue spills the coldest first.
  std::atomic<std::uint64_t> last_use{0};
  // A member of a granule group (null: a block of its own), its index, and
  // whether it was never used: FREED with its VA reserved and nothing
  // mapped there until its first use maps a chunk (Allocator::ensure_resident).
  Group* group = nullptr;
  std::uint32_t member = 0;
  std::atomic<std::uint32_t> pins{0};  // launches being enqueued right now
  // State (state and pins are read lock-free on the launch path).
  std::atomic<State> state{State::Freed};
  // Lifetime class set by the runtime (0: unknown): written under alloc.blocks,
  // read by launches (Engine::may_record_lazily).
  std::atomic<std::uint8_t> lifetime{0};
  std::atomic<bool> untouched{false};  // written under alloc.blocks, read by launches
  bool spillable = true;               // false below TIERRT_MIN_BYTES
  // A slab's use record (Allocator::use_target): the uses of its small
  // allocations, never an allocation itself, never spilled.
  bool slab = false;
  // Uses not yet known complete, one slot per stream (guarded by alloc.uses).
  // Right after the launch path's fields: an eager use record (an
  // activation's, once spills began) touches the first two lines of the
  // block only, in a job on one stream (its slot is the first).
  int nuses = 0;
  UseSlot uses[kMaxUseSlots];

  // Identity (fixed while the block is live).
  std::size_t size = 0;    // bytes the application asked for
  std::size_t mapped = 0;  // size rounded to the granularity

  // Backing (guarded by alloc.blocks; a move in flight owns it meanwhile).
  CUmemGenericAllocationHandle dev = 0;  // device chunk while resident
  HostCopy host;                         // while spilled
  CUdeviceptr shadow = 0;                // remap: second VA for the host chunk

  // When a launch first waited on the fetch under way (steady-clock ns; 0:
  // none; kNeededOnDemand: the fetch was started for a launch, never late).
  std::atomic<std::uint64_t> needed_since{0};
  // Recorded on that launch's stream before it waited on the fetch (a timing
  // event of the use tracker's): whether the stream reached the launch
  // before the copy ended, on the device's clock, is what makes the fetch
  // late. Null when none could be recorded (then the host's clock says).
  std::atomic<CUevent> late_marker{nullptr};
  std::uint32_t user_pins = 0;  // tierrt_advise(PIN) not yet unpinned
  bool remapping = false;   // the VA's mapping is being changed: wait
  bool va_on_host = false;  // remap: the VA is mapped onto the host copy (a spilled block reads over the link)
  bool captured = false;    // named by a captured graph: stays resident
  std::uint32_t gen = 0;    // bumped when a spill starts or is aborted
  std::uint32_t ops_pending = 0;  // mover operations not yet finalised
  bool fences = false;            // a member's spill holds its group's fence (alloc.blocks)
  bool counted_freed = false;     // counted in the FREED statistics (cached)

  CUstream free_stream = nullptr;  // stream of the free, while cached

  // Containers.
  bi::set_member_hook<> cache_hook;     // size-ordered cache of freed blocks
  bi::list_member_hook<> resident_hook; // resident spillable blocks
  bi::list_member_hook<> pool_hook;     // recycled Block objects

  State st() const noexcept { return state.load(std::memory_order_acquire); }
  // No use recorded (slots nor lazy use): asserted where a block is reset.
  bool no_uses() const noexcept { return nuses == 0 && lazy.load(std::memory_order_relaxed) == nullptr; }
};
static_assert(offsetof(Block, slab) < 64, "the launch path's fields of a Block share its first cache line");
static_assert(offsetof(Block, nuses) < 64 && offsetof(Block, uses) + sizeof(UseSlot) <= 128,
              "an eager use record on a one-stream job's block touches its first two cache lines only");

// A large allocation tiered per granule group (Options::group_bytes, remap
// mode): one VA range holding `count` member blocks of `unit` bytes each
// (the last takes the rest), each with its own chunk, state and uses. A
// member is created untouched (no memory behind its VA) and gets a chunk at
// its first use. The launch path learns where launches name addresses
// inside the group (one pair of bits per member, set lock-free) and makes
// resident the members from a named address up to the next such boundary.
// Type-stable: a Group is never deleted (a freed one is reused), so that a
// launch reading a stale member's group reads a group.
//
// The group's fence. An inferred extent may be wrong: a kernel may reach a
// member no hook told tierrt of. Such a kernel must never run while that
// member's bytes are copied or its VA remapped (it would write bytes the
// copy already took, or fault on the unmapped VA). So every launch naming
// the group also names its use record (`record`: its uses are the group's,
// and its launch pins are the group's pins, taken last, after the members
// are resident), and a member's move raises `fence` for its window:
//   - a spill from its claim until its VA is on the host copy (or it was
//     aborted); its copy waits for every use of the group, not the member's;
//   - a fetch from the wait for every use of the group until its copy is
//     enqueued; every later launch naming the group waits for that copy
//     (the record's `ready`, the newest fetch: the fetch stream is in order).
// Invariant: while `fence` is non-zero no launch naming the group is being
// enqueued (pins: pin, then look at the fence; fence, then wait for no pins).
// Until every member was touched once, nothing is mapped behind an untouched
// one: the first launch naming the group touches them all (`untouched`).
struct Group {
  CUdeviceptr va = 0;
  std::size_t bytes = 0;   // asked for
  std::size_t mapped = 0;  // reserved: bytes rounded to the granularity
  std::size_t unit = 0;
  std::uint32_t count = 0;
  // Two bits per member: 2i, a launch named member i's first byte; 2i + 1,
  // a launch named an address inside it past its first byte. Learned per
  // step: `boundaries` in the step under way, `previous` in the one before
  // (null: none kept); an extent ends at what either says, so a boundary
  // launches stopped naming is forgotten after a whole step without it
  // (Allocator::step_ended).
  std::atomic<std::uint64_t>* boundaries = nullptr;
  std::atomic<std::uint64_t>* previous = nullptr;
  Block* record = nullptr;            // the group's use record (Block::slab), type-stable with it
  std::atomic<std::uint32_t> fence{0};  // member moves in their window
  // Debug builds: launches past the fence check and not yet released (the
  // invariant above, asserted where a member's mapping changes).
  std::atomic<std::uint32_t> enqueuing{0};
  std::atomic<std::uint32_t> untouched{0};  // members never mapped (written under alloc.blocks)

  // A launch named an address in member i (`at_start`: its first byte).
  void learn(std::uint32_t i, bool at_start) noexcept {
    const std::uint64_t bit = std::uint64_t{1} << ((2 * i + (at_start ? 0 : 1)) & 63);
    std::atomic<std::uint64_t>& word = boundaries[(2 * i) / 64];
    // Read first: once learned, a launch writes nothing (no shared line bounced).
    if ((word.load(std::memory_order_relaxed) & bit) == 0) word.fetch_or(bit, std::memory_order_relaxed);
  }
  // One past the last member a launch naming member i reaches: up to the
  // next member whose first byte a launch named (excluded) or inside which
  // one named an address (included: the buffer before it may end there), at
  // most `cap` members in all.
  std::uint32_t extent_end(std::uint32_t i, std::uint32_t cap) const noexcept {
    const std::uint32_t last = cap == 0 || count - i < cap ? count : i + cap;
    for (std::uint32_t j = i + 1; j < last; ++j) {
      const std::size_t k = (2 * j) / 64;
      const std::uint64_t both = boundaries[k].load(std::memory_order_relaxed) |
                                 (previous != nullptr ? previous[k].load(std::memory_order_relaxed) : 0);
      const std::uint64_t w = both >> ((2 * j) & 63);
      if (w & 1) return j;
      if (w & 2) return j + 1;
    }
    return last;
  }
  // A step ended: what it learned becomes `previous`, and the next starts
  // afresh. Launches may read meanwhile: a word seen half rotated only
  // changes what is made resident ahead of them, never what is safe.
  void new_step(std::size_t words) noexcept {
    if (previous == nullptr) return;
    for (std::size_t k = 0; k < words; ++k) {
      previous[k].store(boundaries[k].load(std::memory_order_relaxed), std::memory_order_relaxed);
      boundaries[k].store(0, std::memory_order_relaxed);
    }
  }
};

// A granule group's use record: in a launch's list for the whole group.
inline bool is_group_record(const Block* b) noexcept { return b->slab && b->group != nullptr; }

}  // namespace tierrt::alloc
