// The allocator's API for runtime/: tiered device allocations whose address
// never changes while their bytes move between device and pinned host memory.
//
// Threading: every function may be called from any thread that has the
// allocator's context current. lookup() takes no lock; ensure_resident() and
// release() take none when every block is resident and no fetch is pending.
// No lock is held across a driver call.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "allocator/block.h"
#include "allocator/granule_view.h"
#include "allocator/host_placement.h"
#include "allocator/host_share.h"
#include "allocator/spill_mode.h"

namespace tierrt::alloc {

struct Options {
  std::uint64_t device_budget = 0;     // bytes; 0: default_device_budget() (budget_defaults.h)
  std::uint64_t host_budget = 0;       // bytes; 0: default_host_budget()
  std::uint64_t min_bytes = 1u << 20;  // smaller allocations are never spilled
  SpillMode mode = SpillMode::Auto;    // Remap falls back to Copy where host VMM is unsupported
  std::uint64_t pinned_chunk = 64u << 20;  // copy mode: pinned pool growth step
  HostShare* host_share = nullptr;  // host memory shared with other processes, held beside host_budget
  // Granule groups (block.h): in remap mode an allocation of at least
  // group_bytes (0: none) is tiered per member of group_unit bytes (rounded
  // up to the granularity). Copy mode tiers every allocation whole: a kernel
  // reaching past the members a launch was found to name would find nothing
  // mapped there, where remap mode reads it over the link.
  std::uint64_t group_bytes = 0;
  std::uint64_t group_unit = 4u << 20;
  // How long a stream's open use event may gather lazy uses before a launch
  // records it (use_tracker.h): what a wait on a lazy use nobody settled
  // may include of the stream's later work.
  std::uint64_t lazy_use_window_ns = 20'000;
};

struct AllocFlags {
  bool pass_through = false;  // e.g. under stream capture: plain cuMemAlloc
};

enum class SpillResult : std::uint8_t {
  Started,         // the copy is enqueued; SPILLED once it completes
  AlreadyMoving,   // SPILLING, SPILLED or FETCHING already
  Busy,            // pinned (by a launch or the user), captured, or a move not yet finalised
  HostFull,        // the host budget is spent: spilling stops
  NotSpillable,    // below min_bytes, freed, or not ours
  Failed,          // a driver call failed (the block stays resident)
};

struct Stats {
  std::uint64_t blocks[kStateCount] = {};
  std::uint64_t bytes[kStateCount] = {};   // requested bytes per state
  std::uint64_t class_bytes[8] = {};       // live (not freed) bytes per lifetime class
  std::uint64_t cached_bytes = 0, cached_blocks = 0;
  std::uint64_t spare_device_bytes = 0;    // unmapped device chunks kept for the next fetch
  std::uint64_t slab_bytes = 0;            // device bytes held by small-object slabs
  std::uint64_t device_used = 0, device_peak = 0, device_budget = 0;
  std::uint64_t host_used = 0, host_peak = 0, host_budget = 0;
  std::uint64_t pinned_pool_bytes = 0;     // copy mode: pinned chunks held
  // Where the host tier's memory is (host_placement.h). host_node: the
  // device's NUMA node (OnNode, Unplaced), else -1; host_node_bytes: bytes of
  // the tier on it (remap: its host chunks, mapped or spare; copy: pinned
  // pages found there); host_unplaced_bytes: copy mode's pinned bytes
  // elsewhere; host_node_problem: why the node is not used (static text).
  HostPlacement host_placement = HostPlacement::FirstTouch;
  int host_node = -1;
  std::uint64_t host_node_bytes = 0, host_unplaced_bytes = 0;
  const char* host_node_problem = nullptr;
  std::uint64_t allocs = 0, cache_hits = 0, driver_allocs = 0;
  // Attempts and completions are counted apart: spills started, of which
  // done (the block became SPILLED), aborted (used or freed first) or failed
  // (a driver call failed, or tiering stopped under it: the block stayed
  // resident); fetches started (for
  // a launch: demand), of which done (the copy went out; demand_fetches ⊆
  // fetches) or failed (the block stayed where its bytes were); and
  // prefetches put off for want of room within the budget (a prefetch spills
  // nothing; the block stayed on the host, to be tried again).
  std::uint64_t spills = 0, spills_done = 0, spills_aborted = 0, spills_failed = 0, spills_refused_host_full = 0;
  std::uint64_t fetches_started = 0, demand_fetches_started = 0;
  std::uint64_t fetches = 0, demand_fetches = 0, fetches_failed = 0, fetches_put_off = 0;
  // Fetches whose device memory was a freed block's, taken in stream order
  // (the copy waited on the device for its last uses, the host for nothing).
  std::uint64_t chunks_handed_over = 0;
  // Fetches whose device memory was a new chunk (a cuMemCreate call): neither
  // a spare a spill left nor a freed block's. In a steady state, none.
  std::uint64_t fetch_chunks_created = 0;
  std::uint64_t over_budget = 0;  // device claims that passed the budget (the device had room)
  std::uint64_t bytes_spilled = 0, bytes_fetched = 0;
  std::uint64_t rescues = 0, trimmed_bytes = 0;
  // Granule groups: live groups, and their members' bytes never used (no
  // device or host memory behind them; counted in no state above).
  std::uint64_t groups = 0, untouched_bytes = 0;
  std::uint64_t parked_group_bytes = 0;  // device chunks freed groups keep for the next of their size
  std::uint64_t group_steps = 0;  // steps after which the groups' boundaries turned (step_ended)
  // Their fences (block.h, Group): member moves that raised one, launches
  // that found one up and waited on the host, and how long they waited.
  std::uint64_t fenced_moves = 0, fence_waits = 0, fence_wait_ns = 0;
  // Use events recorded (one per eager use, one per open event's record),
  // and uses recorded lazily (sharing their stream's open event).
  std::uint64_t use_events = 0, lazy_uses = 0;
  std::uint64_t lazy_uses_unlocked = 0;  // of lazy_uses, those that took no lock (use_tracker.h)
  std::uint64_t lazy_records_background = 0;  // open use events a background thread recorded
  bool tiering_stopped = false;  // Allocator::stop_tiering: no spill starts
  bool spill_asked = false;      // Allocator::spill_asked
};

// What the mover saw, for whoever plans the moves (the runtime's policy).
// Called without the allocator's lock, from the thread that saw it:
// demand_fetch from a launch being enqueued (keep it short, no blocking),
// late_fetch and copy_done from the mover thread once the copy landed.
class MoveObserver {
 public:
  enum class Direction : std::uint8_t { ToHost, ToDevice };
  // A launch needed a spilled block: it is fetched on demand (the copy has
  // gone out; a fetch that failed is not reported).
  virtual void demand_fetch(const Block& b) noexcept = 0;
  // A launch had to wait `late_ns` for a fetch already under way.
  virtual void late_fetch(const Block& b, std::uint64_t late_ns) noexcept = 0;
  // The launch a demand fetch was started for was reached by its stream
  // `wait_ns` before the copy ended (on the device's clock). A demand fetch
  // the stream reached after its copy ended (the application enqueued far
  // ahead of the device) is not reported: nothing waited for it.
  virtual void demand_fetch_waited(const Block&, std::uint64_t /*wait_ns*/) noexcept {}
  // One spill or fetch copy: its bytes and its duration on the device.
  virtual void copy_done(Direction d, std::uint64_t bytes, std::uint64_t ns) noexcept = 0;
  // Device memory passed the budget for the first time, from the thread
  // that needed it (an allocation, a launch's fetch): `used` bytes against
  // `limit`. Once per allocator; later passes are only counted (Stats).
  virtual void over_budget(std::uint64_t used, std::uint64_t limit) noexcept {
    (void)used;
    (void)limit;
  }
  // Tiering stopped (Allocator::stop_tiering), from the thread that stopped
  // it, with no lock of the allocator's held; once per allocator.
  virtual void tiering_stopped(const char* why) noexcept { (void)why; }

 protected:
  ~MoveObserver() = default;
};

class Allocator {
 public:
  // Binds to the context current on the calling thread (its device).
  static std::unique_ptr<Allocator> create(const Options& opt, CUresult* err = nullptr);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Like cuMemAllocAsync / cuMemFreeAsync: usable on `stream` at once, on
  // other streams after the work they were given. Never fails for want of
  // device memory while idle blocks can be spilled.
  //
  // Memory freed is handed out again only once every use recorded on it
  // completed, or to a stream-ordered allocation (a stream of the
  // application's, not null or CU_STREAM_LEGACY) whose stream then waits for
  // those uses on the device. With null or CU_STREAM_LEGACY (cuMemAlloc,
  // cuMemFree) the memory is usable by every stream at once, so it is
  // reused only once idle; the free itself never waits.
  CUresult allocate(CUdeviceptr* out, std::size_t bytes, CUstream stream,
                    AllocFlags flags = {}) noexcept;
  // CUDA_ERROR_INVALID_VALUE for a pointer that is not the start of a live
  // allocation (an interior pointer, a double free).
  CUresult free(CUdeviceptr ptr, CUstream stream) noexcept;

  // The block containing ptr (interior pointers too), or null: not ours, a
  // small-object slab, or freed (check state()). O(1), lock-free.
  Block* lookup(CUdeviceptr ptr) const noexcept { return block_of(granules_.find(ptr)); }
  // The table's read side, for a caller looking up many pointers (a copy
  // stays in its registers): an entry is 0 where the address is not
  // tierrt's memory, and block_of(entry) is what lookup() answers.
  const GranuleView& granules() const noexcept { return granules_; }
  static Block* block_of(std::uintptr_t entry) noexcept {
    return (entry & kSlabEntryTag) != 0 ? nullptr : reinterpret_cast<Block*>(entry);
  }
  // The block whose allocation starts at `va`, or null. Its start is read
  // under the block lock: another thread (the planner's) may ask while the
  // block is destroyed and recycled for another allocation.
  Block* block_starting_at(CUdeviceptr va) const noexcept;
  bool owns(CUdeviceptr ptr) const noexcept { return granules_.find(ptr) != 0; }
  // What a use of ptr is recorded on: its block, or for a small allocation
  // its slab's use record (Block::slab: no allocation, no VA of its own,
  // never spilled); null when not ours. ensure_resident, record_use and
  // release take both, so that a freed slot waits for the work that named
  // it; the planner knows only blocks (skip Block::slab).
  Block* use_target(CUdeviceptr ptr) const noexcept {
    const std::uintptr_t e = granules_.find(ptr);
    return (e & kSlabEntryTag) != 0 ? slab_uses(e) : reinterpret_cast<Block*>(e);
  }
  // A pass-through allocation (AllocFlags::pass_through) that the caller is
  // freeing through the driver itself: forgotten here, so that nothing frees
  // it twice. False when ptr is not one.
  bool forget_pass_through(CUdeviceptr ptr) noexcept;

  // The blocks not FREED right now: up to out.size() of them are written to
  // out; returns how many there are. A snapshot: any may be freed at once
  // (ensure_resident then fails with INVALID_VALUE for it). Takes
  // alloc.blocks; O(blocks ever made).
  std::size_t live_blocks(std::span<Block*> out) noexcept;

  // Starts a spill: the copy waits on the block's use events on the D2H
  // stream; device memory is released once it completed and nothing used
  // the block since.
  SpillResult spill(Block* b) noexcept;
  // Starts a fetch on the H2D stream and makes `consumer` (if not null) wait
  // for it; no host synchronisation.
  CUresult prefetch(Block* b, CUstream consumer) noexcept;
  // Makes every block usable by work enqueued on `stream` next (demand
  // fetches, or stream waits on pending prefetches) and pins them so that no
  // spill starts until release(). Enqueue the work, record_use(), release().
  CUresult ensure_resident(std::span<Block* const> blocks, CUstream stream) noexcept;
  // The same for work whose use is recorded right after it is enqueued, on
  // this thread (a launch, a copy): where every block is resident already
  // the launch is announced instead of pinned (`*announced`: two stores
  // instead of two read-modify-writes per block; launch_announcements.h).
  // Pass `*announced` to release().
  CUresult ensure_resident_briefly(std::span<Block* const> blocks, CUstream stream, bool* announced) noexcept;
  // `slabs` false: the caller knows no slab's use record is among the
  // blocks (an announced launch then pinned none of them).
  void release(std::span<Block* const> blocks, bool announced = false, bool slabs = true) noexcept;
  // A user pin (tierrt_advise PIN): makes the block usable by work on
  // `stream` next, as ensure_resident does, and keeps it from being spilled
  // until unpin(). Counted apart from launch pins.
  CUresult pin(Block* b, CUstream stream) noexcept;
  // False when the block holds no user pin (launch pins are never touched).
  bool unpin(Block* b) noexcept;
  // Records that work just enqueued on `stream` uses the blocks. Under stream
  // capture pass capturing = true: the blocks then stay resident for good.
  // `lazy`: no event is recorded now unless one is due; the uses share the
  // stream's next (use_tracker.h). Only for a stream every thread of the
  // allocator's context names alike (a named stream, or the legacy stream
  // from a thread on that context), and best when no named block is about
  // to move (a wait on a lazy use may include later work of the stream).
  CUresult record_use(std::span<Block* const> blocks, CUstream stream,
                      bool capturing = false, bool lazy = false) noexcept;
  // Records the stream's pending lazy uses now: before a capture begins on
  // it or it joins one (nothing of tierrt's may be recorded into a
  // capture), and before the stream is destroyed (`stream_destroyed`).
  void flush_uses(CUstream stream, bool stream_destroyed = false) noexcept;
  // A background thread (the policy thread) records the streams' open use
  // events whose window passed, calling record_aged_uses() at each of its
  // turns with the allocator's context current: launches then leave that
  // record to it (use_tracker.h). Off again before that thread ends.
  void set_background_use_records(bool on) noexcept;
  void record_aged_uses() noexcept;

  // Contained failure: tierrt's own machinery went wrong (a broken
  // invariant, an exception where none was expected) and cannot be trusted
  // to move bytes. From now on no spill starts (spill() answers
  // NotSpillable, an allocation over the budget passes it while the device
  // has room), a spill under way ends with its block resident, and spilled
  // blocks come back: by recall(), or when a launch or copy names them.
  // `why` goes to the observer (one log line). Any thread; idempotent.
  void stop_tiering(const char* why) noexcept;
  // Null while tiering runs, else why it stopped.
  const char* tiering_stopped() const noexcept;
  // Whether any spill was asked for yet: before the first, launches on
  // blocks of every kind may share their stream's use event (the engine's
  // may_record_lazily), as nothing is being moved off the device.
  bool spill_asked() const noexcept { return spill_asked_->load(std::memory_order_relaxed); }
  // Brings spilled blocks back while the budget has room, spilling nothing;
  // returns how many stay spilled (they come back when used). Not from the
  // mover's thread (a fetch of a block still moving waits for it).
  std::size_t recall() noexcept;
  // The next spill the mover finalises finds a broken invariant (for tests
  // of the containment).
  void inject_broken_invariant() noexcept;

  // A lifetime class (0: unknown; 1..7: the runtime's classes) for the
  // block that starts at `va`.
  struct ClassTag {
    CUdeviceptr va;
    std::uint8_t lifetime;
  };
  // Sets each block's class where the block starting at its VA is still
  // there (one freed since is left alone), and only where it changes (the
  // class sits on the line every launch naming the block reads). Under the
  // block lock a chunk at a time: a step's worth of blocks (the planner tags
  // every block that lived through the step) costs a few lock holds, not two
  // per block, and keeps no other thread waiting long.
  void set_classes(std::span<const ClassTag> tags) noexcept;
  // Tells `observer` (null: nobody) what the mover sees from now on. It must
  // outlive the allocator.
  void set_observer(MoveObserver* observer) noexcept;
  // Returns cached device memory to the driver (at least `bytes`, or all),
  // then empty slabs if that was not enough.
  std::uint64_t trim(std::uint64_t bytes = UINT64_MAX) noexcept;
  // Returns every empty small-allocation slab whose uses completed.
  std::uint64_t release_empty_slabs() noexcept;
  // Waits until every started spill and fetch is finalised.
  void drain() noexcept;
  // A training step ended (tierrt_mark_step): granule groups' boundaries are
  // learned afresh in the next (Group::new_step).
  void step_ended() noexcept;
  // No spill or fetch starts until the matching resume_moves() (the driver
  // forbids unmapping and mapping while a global-mode stream capture is
  // open); returns once the moves already under way are finalised. Holds
  // nest. A launch needing a spilled block meanwhile reads it over the link
  // (remap) or fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (copy).
  void hold_moves() noexcept;
  void resume_moves() noexcept;

  // Device `peer` was given peer access to this allocator's device: every
  // block and slab, mapped now or later (on the device or, in remap mode,
  // on the host), is read-write for it too. False when some mapping in
  // place could not be granted.
  bool grant_peer(CUdevice peer) noexcept;
  CUdevice device() const noexcept;
  // Whether allocations of group_bytes or more become granule groups (set,
  // and the mode is Remap).
  bool groups_large_allocations() const noexcept;

  Stats stats() const noexcept;
  SpillMode mode() const noexcept;  // the mode in use: Remap or Copy
  std::size_t granularity() const noexcept;

 private:
  struct Parts;  // what it composes (allocator/parts.h)
  explicit Allocator(std::unique_ptr<Parts> parts) noexcept;
  std::unique_ptr<Parts> p_;
  static Block* slab_uses(std::uintptr_t slab_entry) noexcept;  // a slab's use record
  // The mover's flag, read by every launch (no call, no chain of pointers).
  const std::atomic<bool>* spill_asked_;
  // The granule table's read side, for the launch path's lookups (inline,
  // from here rather than through the arena's table).
  GranuleView granules_;
};

}  // namespace tierrt::alloc
