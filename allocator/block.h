// A Block: one tracked device allocation whose VA never changes while what
// backs it (device chunks, host chunks, a pinned buffer) moves.
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
enum class State : std::uint8_t { Resident, Spilling, Spilled, Fetching, Freed };
inline constexpr int kStateCount = 5;

const char* state_name(State s) noexcept;
// The transition table of the state machine above (enforced in mover.cpp).
bool transition_allowed(State from, State to) noexcept;

// A pooled CUevent shared by every block a launch named.
struct UseEvent {
  CUevent ev = nullptr;
  std::atomic<int> refs{0};
  UseEvent* next_free = nullptr;
};

struct UseSlot {
  CUstream stream = nullptr;
  UseEvent* ev = nullptr;
};

inline constexpr int kMaxUseSlots = 8;

struct Block {
  // Identity (fixed while the block is live).
  CUdeviceptr va = 0;
  std::size_t size = 0;    // bytes the application asked for
  std::size_t mapped = 0;  // size rounded to the granularity
  bool spillable = true;   // false below TIERRT_MIN_BYTES

  // Backing (guarded by the allocator's mutex).
  CUmemGenericAllocationHandle dev = 0;   // device chunk while resident
  CUmemGenericAllocationHandle host = 0;  // remap: host chunk while spilled
  void* host_buf = nullptr;               // copy: pinned buffer while spilled
  CUdeviceptr shadow = 0;                 // remap: second VA for the host chunk
  std::uint64_t host_bytes = 0;           // held against the host budget

  // State (state and pins are read lock-free on the launch path).
  std::atomic<State> state{State::Freed};
  std::atomic<std::uint32_t> pins{0};     // launches being enqueued right now
  std::atomic<UseEvent*> ready{nullptr};  // fetch event consumers must wait on
  // When a launch first waited on the fetch under way (steady-clock ns; 0: none).
  std::atomic<std::uint64_t> needed_since{0};
  bool remapping = false;   // the VA's mapping is being changed: wait
  bool captured = false;    // named by a captured graph: stays resident
  std::uint32_t gen = 0;    // bumped when a spill starts or is aborted
  std::uint32_t ops_pending = 0;  // mover operations not yet finalised
  std::uint8_t cls = 0;     // lifetime class set by the runtime
  bool counted_freed = false;  // counted in the FREED statistics (cached)

  // Uses not yet known complete, one slot per stream.
  UseSlot uses[kMaxUseSlots];
  int nuses = 0;
  CUstream free_stream = nullptr;  // stream of the free, while cached

  // Containers.
  bi::set_member_hook<> cache_hook;  // size-ordered cache of freed blocks
  bi::list_member_hook<> lru_hook;   // resident spillable blocks, coldest first
  bi::list_member_hook<> pool_hook;  // recycled Block objects

  State st() const noexcept { return state.load(std::memory_order_acquire); }
};

}  // namespace tierrt::alloc
