// The Allocator facade: creation and teardown, allocation and free, lookup,
// statistics. Launch residency is in residency.cpp, the rescue in rescue.cpp.
#include <algorithm>
#include <cassert>
#include <new>
#include <vector>

#include "parts.h"
#include "driver/driver.h"

namespace tierrt::alloc {

// ---- creation and teardown ----

CUresult Allocator::Parts::init() noexcept {
  CUresult r = arena.init(opt.device_budget);
  if (r != CUDA_SUCCESS) return r;
  backing = HostBacking::create(opt, arena);
  if (backing != nullptr) mover.reset(new (std::nothrow) Mover(blocks, arena, *backing, uses));
  if (mover == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  if (const CUresult u = uses.start(opt.lazy_use_window_ns); u != CUDA_SUCCESS) return u;
  arena.set_reclaimer(this);
  mover->set_donors(this);
  return mover->start();
}

Allocator::Parts::~Parts() {
  if (mover != nullptr) mover->stop();
  if (arena.context() == nullptr) return;
  (void)TIERRT_CU(cuCtxSetCurrent, arena.context());
  (void)TIERRT_CU(cuCtxSynchronize);
  blocks.drop_all([&](Block* b) {
    (void)uses.forget(b, /*synchronize=*/false);
    uses.unref(b->ready.exchange(nullptr));
    destroy_block(b);
  });
  (void)release_parked(UINT64_MAX);
  // Members were destroyed with the blocks; their groups' ranges go now.
  groups.for_each_live([&](Group* g) {
    (void)uses.forget(g->record, /*synchronize=*/false);
    uses.unref(g->record->ready.exchange(nullptr));
    arena.free_address(g->va, g->mapped);
  });
  for (CUdeviceptr p : raw) (void)TIERRT_CU(cuMemFree, p);
}

std::unique_ptr<Allocator> Allocator::create(const Options& opt, CUresult* err) {
  std::unique_ptr<Parts> p(new (std::nothrow) Parts(opt));
  CUresult r = p != nullptr ? p->init() : CUDA_ERROR_OUT_OF_MEMORY;
  std::unique_ptr<Allocator> a;
  if (r == CUDA_SUCCESS) a.reset(new (std::nothrow) Allocator(std::move(p)));
  if (r == CUDA_SUCCESS && a == nullptr) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (err != nullptr) *err = r;
  return a;
}

Allocator::Allocator(std::unique_ptr<Parts> parts) noexcept
    : p_(std::move(parts)), spill_asked_(&p_->mover->spill_asked_flag()), granules_(p_->arena.table().view()) {}
Allocator::~Allocator() = default;

// ---- allocation ----

CUresult Allocator::allocate(CUdeviceptr* out, std::size_t bytes, CUstream stream, AllocFlags flags) noexcept {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  *out = 0;
  p_->allocs.fetch_add(1, std::memory_order_relaxed);
  if (flags.pass_through) return p_->allocate_raw(out, bytes);
  if (bytes < p_->opt.min_bytes && SlabPools::fits(bytes)) return p_->slabs.allocate(out, bytes, stream);
  if (p_->grouping() && bytes >= p_->opt.group_bytes) return p_->allocate_group(out, bytes);
  return p_->allocate_block(out, bytes, stream, bytes >= p_->opt.min_bytes);
}

CUresult Allocator::Parts::allocate_raw(CUdeviceptr* out, std::size_t bytes) noexcept {
  const CUresult r = TIERRT_CU(cuMemAlloc, out, bytes);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<RankedMutex> g(raw_mu);
  raw.insert(*out);
  return r;
}

bool Allocator::forget_pass_through(CUdeviceptr ptr) noexcept {
  std::lock_guard<RankedMutex> g(p_->raw_mu);
  return p_->raw.erase(ptr) != 0;
}

CUresult Allocator::Parts::free_raw(CUdeviceptr p) noexcept {
  {
    std::lock_guard<RankedMutex> g(raw_mu);
    if (raw.erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  return TIERRT_CU(cuMemFree, p);
}

CUresult Allocator::Parts::allocate_block(CUdeviceptr* out, std::size_t bytes, CUstream s, bool spillable) noexcept {
  const std::size_t mapped = arena.round_up(bytes);
  Block* b = nullptr;
  CUresult r = reuse_cached(mapped, bytes, spillable, s, &b);
  if (r == CUDA_SUCCESS && b == nullptr) r = create_block(mapped, bytes, spillable, &b);
  if (r == CUDA_SUCCESS) *out = b->va;
  return r;
}

CUresult Allocator::Parts::reuse_cached(std::size_t mapped, std::size_t bytes, bool spillable, CUstream s,
                                        Block** out) noexcept {
  if (!stream_ordered(s)) return reuse_idle(mapped, bytes, spillable, out);
  // Every access to a block is a recorded use (the runtime records launches,
  // copies and memsets that name it), so reuse on `s` waits only for uses on
  // other streams: none when the block was used and freed on `s`, the steady
  // state of a training step.
  UseSlot waits[kMaxUses];
  int nwaits = 0;
  Block* b = nullptr;
  {
    auto l = blocks.lock();
    b = blocks.reuse(mapped, bytes, spillable, s, l);
    if (b == nullptr) return CUDA_SUCCESS;
    nwaits = uses.take_refs_owned(b, waits, s);
  }
  cache_hits.fetch_add(1, std::memory_order_relaxed);
  uses.touch(b);
  const CUresult r =
      nwaits == 0 ? CUDA_SUCCESS : uses.wait_then_unref(s, {waits, static_cast<std::size_t>(nwaits)});
  if (r != CUDA_SUCCESS) {
    // Its earlier uses cannot be waited for now (one with no event on a
    // stream that captures since, or a wait that failed): it goes back to
    // the cache, and the allocation takes fresh memory, as the driver's own
    // would, rather than failing.
    (void)free_block(b, b->va, s);
    return CUDA_SUCCESS;
  }
  *out = b;
  return CUDA_SUCCESS;
}

CUresult Allocator::Parts::reuse_idle(std::size_t mapped, std::size_t bytes, bool spillable, Block** out) noexcept {
  // Memory that is not stream-ordered is usable by every stream at once: a
  // cached block qualifies only when every use recorded on it completed.
  // The queries run without the lock; a block reused meanwhile by another
  // thread only loses uses that completed, which is right whoever holds it.
  BlockCache::Fits fits;
  {
    auto l = blocks.lock();
    fits = blocks.cached_fits(mapped, l);
  }
  if (fits.b[0] == nullptr) return CUDA_SUCCESS;
  for (Block* c : fits)
    if (c != nullptr) (void)uses.retire_completed(c);
  Block* b = nullptr;
  {
    auto l = blocks.lock();
    b = blocks.reuse_if(mapped, bytes, spillable, [&](Block* c) { return uses.idle(c); }, l);
  }
  if (b == nullptr) return CUDA_SUCCESS;
  cache_hits.fetch_add(1, std::memory_order_relaxed);
  uses.touch(b);
  *out = b;
  return CUDA_SUCCESS;
}

CUresult Allocator::Parts::create_block(std::size_t mapped, std::size_t bytes, bool spillable, Block** out) noexcept {
  Block* b = blocks.new_block();
  const BlockStates::Claim arriving(blocks);  // until the block is RESIDENT: a rescue elsewhere waits for it
  DeviceRange range;
  const CUresult r =
      arena.create_range(mapped, reinterpret_cast<std::uintptr_t>(b), Claimant{.holds_claim = true}, &range);
  if (r != CUDA_SUCCESS) {
    blocks.recycle(b);
    return r;
  }
  blocks_made.fetch_add(1, std::memory_order_relaxed);
  {
    auto l = blocks.lock();
    b->va = range.va;
    b->size = bytes;
    b->mapped = mapped;
    b->spillable = spillable;
    b->dev = range.chunk;
    blocks.set_state(b, State::Resident, l);
  }
  uses.touch(b);
  *out = b;
  return CUDA_SUCCESS;
}

// ---- free ----

CUresult Allocator::free(CUdeviceptr ptr, CUstream stream) noexcept {
  if (ptr == 0) return CUDA_SUCCESS;
  const std::uintptr_t e = p_->arena.table().find(ptr);
  if (e == 0) return p_->free_raw(ptr);
  if (SlabPools::is_slab(e)) return p_->slabs.free(SlabPools::slab_of(e), ptr, stream);
  Block* b = reinterpret_cast<Block*>(e);
  if (Group* g = b->group) return p_->free_group(g, ptr);
  return p_->free_block(b, ptr, stream);
}

CUresult Allocator::Parts::settle_for_free(Block* b, BlockStates::Lock& l, State* out) noexcept {
  State st = blocks.settle(b, l);
  for (;;) {
    if (st == State::Fetching) {
      // The fetch's copy becomes a use: a reuse waits for it.
      UseEvent* r = b->ready.exchange(nullptr);
      blocks.set_state(b, State::Resident, l);
      if (r != nullptr && !uses.try_adopt(b, mover->fetch_stream(), r)) {
        l.unlock();
        const CUresult w = UseTracker::wait_host(UseSlot{mover->fetch_stream(), r});
        uses.unref(r);
        if (w != CUDA_SUCCESS) return w;  // the copy may still write: the block stays
        l.lock();
      }
    } else if (st == State::Spilled && b->ops_pending != 0) {
      // The mover sets SPILLED, then ends the move: the block is
      // destroyed only after it let go, else the move's end lands on a
      // recycled block (found by scripts/soak).
      blocks.wait_moves_of(b, l);
    } else {
      break;
    }
    st = blocks.settle(b, l);
  }
  *out = st;
  return CUDA_SUCCESS;
}

CUresult Allocator::Parts::free_block(Block* b, CUdeviceptr p, CUstream s) noexcept {
  {
    auto l = blocks.lock();
    if (b->va != p) return CUDA_ERROR_INVALID_VALUE;
    State st = State::Freed;
    if (const CUresult r = settle_for_free(b, l, &st)) return r;
    if (st == State::Freed) return CUDA_ERROR_INVALID_VALUE;
    if (st == State::Resident) {
      blocks.cache(b, s, l);
      return CUDA_SUCCESS;
    }
    blocks.set_state(b, State::Freed, l);  // SPILLED: the host copy and the VA go
  }
  // Uses over the link (remap) end before the host copy goes. When that
  // cannot be known the block stays, FREED, until teardown.
  const CUresult r = uses.forget(b, /*synchronize=*/true);
  if (r == CUDA_SUCCESS) destroy_block(b);
  return r;
}

void Allocator::Parts::destroy_block(Block* b) noexcept {
  uses.release_mark(b->late_marker.exchange(nullptr, std::memory_order_acq_rel));
  if (b->group != nullptr) return destroy_member(b);
  assert(b->ops_pending == 0);
  assert(b->no_uses());
  assert(b->ready.load() == nullptr);
  backing->destroy(b);
  arena.destroy_range(DeviceRange{b->va, b->mapped, b->dev});
  b->dev = 0;
  blocks.recycle(b);
}

// ---- the rest of the face ----

Block* Allocator::block_starting_at(CUdeviceptr va) const noexcept {
  Block* b = lookup(va);
  if (b == nullptr) return nullptr;
  auto l = p_->blocks.lock();
  return b->va == va ? b : nullptr;
}

Block* Allocator::slab_uses(std::uintptr_t slab_entry) noexcept { return &SlabPools::slab_of(slab_entry)->uses; }

std::uint64_t Allocator::release_empty_slabs() noexcept { return p_->slabs.release_empty(/*wait=*/false); }

SpillResult Allocator::spill(Block* b) noexcept {
  return b != nullptr ? p_->mover->spill(b) : SpillResult::NotSpillable;
}

CUresult Allocator::prefetch(Block* b, CUstream consumer) noexcept {
  return b != nullptr ? p_->mover->fetch(b, consumer, false) : CUDA_ERROR_INVALID_VALUE;
}

void Allocator::stop_tiering(const char* why) noexcept { p_->mover->stop_tiering(why); }
const char* Allocator::tiering_stopped() const noexcept { return p_->mover->tiering_stopped(); }
void Allocator::inject_broken_invariant() noexcept { p_->mover->inject_broken_invariant(); }

std::size_t Allocator::recall() noexcept {
  drain();  // spills under way end first (resident, once tiering stopped)
  std::vector<Block*> live;
  try {
    live.resize(256);
    std::size_t n;
    while ((n = live_blocks(live)) > live.size()) live.resize(n);
    live.resize(n);
  } catch (const std::bad_alloc&) {
    return live_blocks({});  // not known which: they come back when used
  }
  std::size_t left = 0;
  for (Block* b : live) {
    const State st = b->st();
    if (st != State::Spilled && st != State::Spilling) continue;
    const CUresult r = p_->mover->fetch(b, nullptr, /*demand=*/false);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) ++left;  // no room within the budget
  }
  return left;
}

void Allocator::set_classes(std::span<const ClassTag> tags) noexcept {
  constexpr std::size_t kChunk = 256;
  for (std::size_t i = 0; i < tags.size(); i += kChunk) {
    auto l = p_->blocks.lock();
    for (const ClassTag& t : tags.subspan(i, std::min(kChunk, tags.size() - i)))
      if (Block* b = lookup(t.va); b != nullptr && b->va == t.va) p_->blocks.set_lifetime(b, t.lifetime, l);
  }
}
void Allocator::set_observer(MoveObserver* observer) noexcept { p_->mover->set_observer(observer); }
std::uint64_t Allocator::trim(std::uint64_t bytes) noexcept {
  const std::uint64_t sum = p_->trim(bytes);
  return sum < bytes ? sum + p_->slabs.release_empty(/*wait=*/false) : sum;
}
void Allocator::drain() noexcept { p_->blocks.wait_moves_done(); }

void Allocator::step_ended() noexcept {
  auto l = p_->blocks.lock();
  p_->groups.new_step(l);
  ++p_->steps_ended;
}

void Allocator::hold_moves() noexcept {
  {
    auto l = p_->blocks.lock();
    p_->mover->hold_locked();
  }
  drain();
}

void Allocator::resume_moves() noexcept {
  auto l = p_->blocks.lock();
  p_->mover->resume_locked();
}
SpillMode Allocator::mode() const noexcept { return p_->backing->mode(); }
std::size_t Allocator::granularity() const noexcept { return p_->arena.granularity(); }
bool Allocator::grant_peer(CUdevice peer) noexcept { return p_->arena.add_peer(peer); }
CUdevice Allocator::device() const noexcept { return p_->arena.device(); }
bool Allocator::groups_large_allocations() const noexcept { return p_->grouping(); }

Stats Allocator::stats() const noexcept {
  Stats s;
  p_->blocks.fill_stats(&s);
  p_->mover->fill_stats(&s);
  s.spare_device_bytes = p_->arena.spare_bytes();
  s.slab_bytes = p_->slabs.bytes();
  const Budget& dev = p_->arena.budget();
  s.device_used = dev.used();
  s.device_peak = dev.peak();
  s.device_budget = dev.limit();
  s.over_budget = dev.over_limit();
  const Budget& host = p_->backing->budget();
  s.host_used = host.used();
  s.host_peak = host.peak();
  s.host_budget = host.limit();
  s.pinned_pool_bytes = p_->backing->pinned_pool_bytes();
  p_->backing->fill_placement(&s);
  s.allocs = p_->allocs.load(std::memory_order_relaxed);
  s.cache_hits = p_->cache_hits.load(std::memory_order_relaxed);
  s.driver_allocs = p_->blocks_made.load(std::memory_order_relaxed) + p_->slabs.slabs_made();
  s.trimmed_bytes = p_->trimmed.load(std::memory_order_relaxed);
  s.tiering_stopped = p_->mover->tiering_stopped() != nullptr;
  s.spill_asked = p_->mover->spill_asked();
  p_->uses.counts(&s.use_events, &s.lazy_uses, &s.lazy_uses_unlocked);
  s.lazy_records_background = p_->uses.background_records();
  {
    auto l = p_->blocks.lock();
    s.groups = p_->live_groups;
    s.group_steps = p_->steps_ended;
    s.untouched_bytes = p_->untouched_bytes;
    s.parked_group_bytes = p_->parked.bytes();
  }
  return s;
}

}  // namespace tierrt::alloc
