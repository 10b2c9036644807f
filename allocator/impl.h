// Internal: the allocator's state, shared by arena.cpp (allocation, cache,
// slabs, budgets, OOM rescue) and mover.cpp (the block state machine and the
// mover with its D2H / H2D streams).
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include <boost/intrusive/list.hpp>

#include "allocator/allocator.h"
#include "allocator/block_cache.h"
#include "allocator/budget.h"
#include "allocator/chunk_spares.h"
#include "allocator/granule_table.h"
#include "allocator/host_tier.h"
#include "driver/driver.h"

namespace tierrt::alloc {

using LruList = bi::list<Block, bi::member_hook<Block, bi::list_member_hook<>, &Block::lru_hook>,
                         bi::constant_time_size<true>>;
using PoolList = bi::list<Block, bi::member_hook<Block, bi::list_member_hook<>, &Block::pool_hook>>;

// A 2 MiB (or one-granule) device chunk cut into equal slots of one size class.
struct Slab {
  CUdeviceptr base = 0;
  std::size_t bytes = 0;
  CUmemGenericAllocationHandle handle = 0;
  unsigned cls = 0;            // slot size = 1 << cls
  CUstream stream = nullptr;   // slots are reused on this stream
  std::vector<std::uint32_t> free_slots;
  std::uint32_t capacity = 0;
  bi::list_member_hook<> hook;  // in its pool's list of slabs with free slots
};
using SlabList = bi::list<Slab, bi::member_hook<Slab, bi::list_member_hook<>, &Slab::hook>>;

inline constexpr unsigned kSlabMinShift = 9;   // 512 B
inline constexpr unsigned kSlabMaxShift = 20;  // 1 MiB
inline constexpr std::uintptr_t kSlabTag = 1;

// A move the mover thread finalises once its event completed.
struct MoveOp {
  enum Kind { Spill, Fetch } kind;
  Block* b;
  std::uint32_t gen;
  UseEvent* ev;
  CUmemGenericAllocationHandle host = 0;  // remap host chunk
  void* host_buf = nullptr;               // copy pinned buffer
  std::uint64_t host_bytes = 0;           // reserved against the host budget
  CUevent copy_begin = nullptr, copy_end = nullptr;  // timing pair around the copy (may be null)
};

class Impl {
 public:
  explicit Impl(const Options& o) : opt(o) {}
  ~Impl();

  CUresult init() noexcept;

  // ---- arena.cpp ----
  CUresult allocate(CUdeviceptr* out, std::size_t bytes, CUstream s, AllocFlags f);
  CUresult free(CUdeviceptr p, CUstream s);
  CUresult alloc_block(CUdeviceptr* out, std::size_t bytes, CUstream s, bool spillable);
  CUresult alloc_small(CUdeviceptr* out, std::size_t bytes, CUstream s);
  void free_small(Slab* slab, CUdeviceptr p);
  // Device memory: reserve against the budget, rescuing (trim, then spill the
  // coldest idle blocks) when it does not fit. `spill_ok` false: trim only.
  bool reserve_device(std::uint64_t bytes, bool spill_ok, const Block* except);
  // Frees device memory for `bytes` more (trim, then spill); waits for the
  // spills it started. Nothing: nothing could be freed; Freed: memory was
  // freed (or spills finished); Busy: every candidate was in use for a
  // moment, and it waited a little.
  enum class Rescue : std::uint8_t { Nothing, Freed, Busy };
  Rescue rescue(std::uint64_t bytes, bool spill_ok, const Block* except);
  std::uint64_t trim(std::uint64_t bytes);
  // A device chunk of `bytes` whose share of the budget is held: a spare, or
  // a new one (reserve, then create).
  CUresult obtain_device_chunk(std::size_t bytes, CUmemGenericAllocationHandle* h, bool spill_ok,
                               const Block* except);
  // A new chunk of `bytes`, already reserved by the caller.
  CUresult create_device_chunk(std::size_t bytes, CUmemGenericAllocationHandle* h, bool spill_ok,
                               const Block* except);
  // An unmapped device chunk nobody needs: kept as a spare, or released.
  void give_device_chunk(CUmemGenericAllocationHandle h, std::size_t bytes);
  std::uint64_t release_spares(std::uint64_t bytes);
  CUresult map_rw(CUdeviceptr va, std::size_t bytes, CUmemGenericAllocationHandle h, bool host_too);
  void destroy_block(Block* b);  // releases everything; b must be out of every container
  Block* new_block();
  void recycle_block(Block* b);

  // ---- mover.cpp ----
  void set_state(Block* b, State to);  // the only writer of Block::state
  SpillResult spill(Block* b);
  CUresult fetch(Block* b, CUstream consumer, bool demand);
  CUresult ensure_resident(std::span<Block* const> blocks, CUstream s);
  void release(std::span<Block* const> blocks);
  CUresult record_use(std::span<Block* const> blocks, CUstream s, bool capturing);
  bool abort_spill_locked(Block* b);
  // With `l` held on mu: waits out a remap and aborts a spill under way, so
  // that what is left is FREED (also for a block without a VA), RESIDENT,
  // SPILLED or FETCHING. May release `l` while it waits.
  State settle_locked(Block* b, std::unique_lock<std::mutex>& l);
  void mover_loop();
  void finalize(MoveOp* op);
  void drain();
  UseEvent* acquire_event();
  void unref(UseEvent* e);
  // A timing-enabled pair for measuring one copy; both null when none can be made.
  void acquire_timing(MoveOp* op);
  void release_timing(MoveOp* op);
  // Reports the copy's bytes and device time to the observer (after its event completed).
  void report_copy(const MoveOp& op);
  void clear_uses_locked(Block* b, std::vector<UseEvent*>* drop);
  Stats stats() const;

  Options opt;
  SpillMode mode = SpillMode::Copy;
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  std::size_t gran = 2u << 20;
  std::uint64_t device_total = 0;
  std::unique_ptr<GranuleTable> table;
  HostTier host;
  ChunkSpares dev_spares;
  CUstream d2h = nullptr, h2d = nullptr;

  mutable std::mutex mu;           // containers, block backing, counters
  std::condition_variable cv;      // a block's move or remap finished
  std::condition_variable mover_cv;  // a move was queued (the mover waits here)
  BlockCache cache;
  LruList lru;
  PoolList pool;
  std::deque<Block> storage;       // type-stable: Block objects are never deleted
  Budget dev_budget, host_budget;
  std::unordered_set<CUdeviceptr> raw;  // pass-through allocations

  std::mutex slab_mu;
  struct SlabPool {
    CUstream stream;
    SlabList partial;
  };
  std::vector<std::unique_ptr<SlabPool>> slab_pools[kSlabMaxShift + 1];
  std::vector<Slab*> all_slabs;

  std::mutex ev_mu;
  UseEvent* ev_free = nullptr;
  std::deque<UseEvent> ev_storage;
  std::vector<CUevent> timing_free;  // guarded by ev_mu
  std::size_t timing_made = 0;       // guarded by ev_mu
  std::atomic<MoveObserver*> observer{nullptr};

  std::deque<MoveOp*> ops;         // guarded by mu
  std::size_t ops_in_flight = 0;   // queued or being finalised
  std::size_t spills_in_flight = 0;
  bool stopping = false;
  std::thread mover;

  // Counters (guarded by mu unless atomic).
  std::uint64_t st_blocks[kStateCount] = {}, st_bytes[kStateCount] = {};
  std::uint64_t class_bytes[8] = {};
  std::atomic<std::uint64_t> n_allocs{0}, n_cache_hits{0}, n_driver_allocs{0};
  std::uint64_t n_spills = 0, n_aborted = 0, n_host_full = 0, n_fetches = 0, n_demand = 0;
  std::uint64_t n_bytes_spilled = 0, n_bytes_fetched = 0, n_rescues = 0, n_trimmed = 0;
  std::atomic<std::uint64_t> slab_bytes{0};
};

}  // namespace tierrt::alloc
