#include "block_states.h"
#include "launch_announcements.h"

#include <cassert>
#include <optional>

#include "steady_clock.h"

namespace tierrt::alloc {

BlockStates::~BlockStates() {
  resident_.clear();
  pool_.clear();
}

Block* BlockStates::new_block() noexcept {
  std::lock_guard<RankedMutex> g(mu_);
  if (!pool_.empty()) {
    Block* b = &pool_.front();
    pool_.pop_front();
    return b;
  }
  return storage_.make();
}

void BlockStates::recycle(Block* b) noexcept {
  std::lock_guard<RankedMutex> g(mu_);
  assert(b->ops_pending == 0 && b->no_uses() && b->dev == 0 && b->host.chunk == 0 && b->host.buf == nullptr);
  assert(!b->cache_hook.is_linked() && !b->resident_hook.is_linked());
  uncount_freed(b);
  b->va = b->shadow = 0;
  b->size = b->mapped = 0;
  b->remapping = b->captured = b->va_on_host = false;
  b->user_pins = 0;
  b->lifetime = 0;
  b->group = nullptr;
  b->member = 0;
  b->untouched = false;
  pool_.push_back(*b);
}

void BlockStates::uncount_freed(Block* b) noexcept {
  if (b->counted_freed) count(State::Freed, b, -1);
  b->counted_freed = false;
}

void BlockStates::return_donor(Block* b, const Lock&) noexcept {
  assert(b->st() == State::Freed && !b->counted_freed);
  count(State::Freed, b, +1);
  b->counted_freed = true;
  cache_.insert(b);
}

void BlockStates::count(State s, const Block* b, int delta) noexcept {
  const int i = static_cast<int>(s);
  state_blocks_[i] += static_cast<std::uint64_t>(delta);
  state_bytes_[i] += static_cast<std::uint64_t>(delta) * b->size;
}

void BlockStates::set_state(Block* b, State to, const Lock&) noexcept {
  const State from = b->st();
  assert(legal_transition(from, to));
  // Device memory goes only once the spill's copy completed (the mover has
  // released the chunk), and nothing the user pinned is spilled.
  assert(to != State::Spilled || (b->dev == 0 && b->user_pins == 0));
  assert(to != State::Resident || b->dev != 0);
  // Only a member never used starts out spilled: it has no bytes to lose.
  assert(from != State::Freed || to != State::Spilled || (b->group != nullptr && b->untouched));
  // A block leaving FREED for the first time (brand new) was never counted.
  if (from != State::Freed || b->counted_freed) count(from, b, -1);
  count(to, b, +1);
  // Live bytes per lifetime class: what is not FREED.
  if (from == State::Freed) lifetime_bytes_[b->lifetime] += b->size;
  if (to == State::Freed) lifetime_bytes_[b->lifetime] -= b->size;
  b->counted_freed = to == State::Freed;
  if (to == State::Resident && b->spillable) {
    if (!b->resident_hook.is_linked()) resident_.push_back(*b);
  } else if (b->resident_hook.is_linked()) {
    resident_.erase(resident_.iterator_to(*b));
  }
  b->state.store(to, std::memory_order_seq_cst);
}

State BlockStates::settle(Block* b, Lock& l, std::span<Block* const> pinned) noexcept {
  std::optional<PinHolder> waiting;
  for (;;) {
    const State st = b->st();
    if (st == State::Freed || b->va == 0) return State::Freed;
    if (b->remapping) {
      if (!waiting) waiting.emplace(pinned, l, *this);
      changed_.wait(l);
      continue;
    }
    if (st == State::Spilling) {
      abort_spill(b, l);
      continue;
    }
    return st;
  }
}

void BlockStates::wait_remapped(const Block* b, Lock& l, std::span<Block* const> pinned) noexcept {
  std::optional<PinHolder> waiting;
  while (b->remapping) {
    if (!waiting) waiting.emplace(pinned, l, *this);
    changed_.wait(l);
  }
}

void BlockStates::abort_spill(Block* b, const Lock& l) noexcept {
  ++b->gen;  // the pending copy is discarded when it completes
  ++aborted_;
  set_state(b, State::Resident, l);
  // The copy only reads the member, and its VA stays: the window is over.
  if (b->fences) drop_fence(b, l);
  changed_.notify_all();
}

void BlockStates::raise_fence(Block* member, const Lock& l) noexcept {
  assert(member->group != nullptr && !member->fences);
  member->fences = true;
  raise_group_fence(member->group, l);
}

void BlockStates::drop_fence(Block* member, const Lock& l) noexcept {
  assert(member->fences);
  member->fences = false;
  drop_group_fence(member->group, l);
}

void BlockStates::drop_group_fence(Group* g, const Lock&) noexcept {
  const std::uint32_t was = g->fence.fetch_sub(1, std::memory_order_seq_cst);
  assert(was > 0);
  (void)was;
  changed_.notify_all();
}

void BlockStates::wait_unfenced(const Group* g, Lock& l, std::span<Block* const> pinned) noexcept {
  if (g->fence.load(std::memory_order_seq_cst) == 0) return;
  const std::uint64_t t0 = steady_ns();
  {
    const PinHolder waiting(pinned, l, *this);
    while (g->fence.load(std::memory_order_seq_cst) != 0) changed_.wait(l);
  }
  ++fence_waits_;
  fence_wait_ns_ += steady_ns() - t0;
}

void BlockStates::set_lifetime(Block* b, std::uint8_t lifetime, const Lock&) noexcept {
  lifetime &= 7;
  if (b->lifetime == lifetime) return;
  if (b->st() != State::Freed) {
    lifetime_bytes_[b->lifetime] -= b->size;
    lifetime_bytes_[lifetime] += b->size;
  }
  b->lifetime = lifetime;
}

Block* BlockStates::reuse(std::size_t mapped, std::size_t size, bool spillable, CUstream s, const Lock& l) noexcept {
  Block* b = cache_.take(mapped, s);
  if (b != nullptr) revive(b, size, spillable, l);
  return b;
}

void BlockStates::revive(Block* b, std::size_t size, bool spillable, const Lock& l) noexcept {
  // Out of FREED with its old size; set_state counts it in with the new one.
  uncount_freed(b);
  b->size = size;
  b->spillable = spillable;
  b->lifetime = 0;
  b->captured = false;
  b->user_pins = 0;
  set_state(b, State::Resident, l);
}

void BlockStates::cache(Block* b, CUstream s, const Lock& l) noexcept {
  set_state(b, State::Freed, l);
  b->free_stream = s;
  cache_.insert(b);
}

void BlockStates::begin_move(Block* b, Move m, const Lock&) noexcept {
  ++b->ops_pending;
  ++moves_;
  if (m == Move::Spill) ++spills_;
  if (m == Move::Fetch) ++fetches_unqueued_;
}

void BlockStates::end_move(Block* b, Move m, bool queued) noexcept {
  {
    std::lock_guard<RankedMutex> g(mu_);
    assert(b->ops_pending > 0 && moves_ > 0);
    --b->ops_pending;
    --moves_;
    if (m == Move::Spill) --spills_;
    if (m == Move::Fetch) --(queued ? fetches_queued_ : fetches_unqueued_);
    // A spill given up before it was queued freed nothing: counting it as a
    // change would send every waiting rescue back to try the same spill,
    // whose undoing wakes them again (a livelock). The waiters still look
    // again, at one spill fewer in flight.
    if (m != Move::Spill || queued) ++generation_;
  }
  changed_.notify_all();
}

void BlockStates::wait_moves_done() noexcept {
  Lock l(mu_);
  changed_.wait(l, [&] { return moves_ == 0; });
}

void BlockStates::wait_moves_of(const Block* b, Lock& l) noexcept {
  changed_.wait(l, [&] { return b->ops_pending == 0; });
}

void BlockStates::wait_spills_done() noexcept {
  Lock l(mu_);
  changed_.wait(l, [&] { return spills_ == 0; });
}

BlockStates::Claim::Claim(BlockStates& s) noexcept : s_(s) {
  std::lock_guard<RankedMutex> g(s.mu_);
  ++s.claims_;
}

BlockStates::Claim::Claim(BlockStates& s, const Lock&) noexcept : s_(s) { ++s.claims_; }

BlockStates::Claim::~Claim() {
  {
    std::lock_guard<RankedMutex> g(s_.mu_);
    --s_.claims_;
    ++s_.generation_;
  }
  s_.changed_.notify_all();
}

BlockStates::Rescuing::Rescuing(BlockStates& s) noexcept : s_(s) {
  std::lock_guard<RankedMutex> g(s.mu_);
  s.rescuing_.fetch_add(1, std::memory_order_seq_cst);
  ++s.rescues_;
  seen_ = s.generation_;
}

BlockStates::Rescuing::~Rescuing() { s_.rescuing_.fetch_sub(1, std::memory_order_seq_cst); }

BlockStates::PinHolder::PinHolder(std::span<Block* const> p, const Lock&, BlockStates& s, bool holds_claim) noexcept
    : pinned(p), s_(s), holds_claim_(holds_claim) {
  if (holds_claim_) ++s_.waiting_claims_;
  if (!pinned.empty()) s_.holders_.push_back(*this);
  // A rescue waiting for these pins to be released, or for this claim to
  // end, can stop waiting.
  if (holds_claim_ || !pinned.empty()) s_.changed_.notify_all();
}

BlockStates::PinHolder::~PinHolder() {
  if (holds_claim_) --s_.waiting_claims_;
  if (hook.is_linked()) s_.holders_.erase(s_.holders_.iterator_to(*this));
}

void BlockStates::pins_released() noexcept {
  // Pairs with Rescuing (announce, then look at pins): a rescue that saw the
  // pin held is told, one that did not saw it released.
  if (rescuing_.load(std::memory_order_seq_cst) == 0) return;
  {
    std::lock_guard<RankedMutex> g(mu_);
    ++generation_;
  }
  changed_.notify_all();
}

std::uint32_t BlockStates::pins_of_waiting_threads_locked(const Block* b) const noexcept {
  std::uint32_t waiting = 0;
  for (const PinHolder& h : holders_)
    for (const Block* p : h.pinned) waiting += p == b;
  return waiting;
}

bool BlockStates::could_change_locked(std::span<Block* const> held) const noexcept {
  if (spills_ != 0 || fetches_queued_ != 0) return true;
  if (claims_ + fetches_unqueued_ > waiting_claims_) return true;
  // A launch announced now is enqueuing, never waiting (it pins before it
  // could wait): it lets go of its blocks soon. Looked at once per slot, not
  // once per resident block.
  bool announced = false;
  const bool looked = LaunchAnnouncements::for_each_announced(
      [](const Block* b, void* found) {
        // Type-stable storage: a recycled block reads as what it is now.
        if (b->st() == State::Resident && !b->captured && b->user_pins == 0) *static_cast<bool*>(found) = true;
      },
      &announced);
  if (announced || !looked) return true;
  // A launch lets go of its blocks (drops its pins, ends its announcement)
  // before its release() takes this lock to move the generation. A candidate
  // the rescue found held that is free now (or no longer RESIDENT) was let
  // go of, counted or not yet: the count comes (the rescue was announced
  // before it looked) and is waited for. Each block's pins are read once, so
  // that a release between two reads cannot pass for "nothing can change".
  for (const Block* b : held)
    if (b->st() != State::Resident) return true;
  for (const Block& b : resident_) {
    if (b.captured || b.user_pins != 0) continue;
    const std::uint32_t pins = b.pins.load(std::memory_order_seq_cst);
    if (pins > pins_of_waiting_threads_locked(&b)) return true;
    if (pins == 0 && std::find(held.begin(), held.end(), &b) != held.end()) return true;
  }
  return false;
}

bool BlockStates::wait_for_change(std::uint64_t seen, Lock& l, std::span<Block* const> pinned, bool holds_claim,
                                  std::span<Block* const> held) noexcept {
  PinHolder waiting(pinned, l, *this, holds_claim);
  for (;;) {
    if (generation_ != seen) return true;
    if (!could_change_locked(held)) return false;
    changed_.wait(l);
  }
}

void BlockStates::fill_stats(Stats* s) noexcept {
  std::lock_guard<RankedMutex> g(mu_);
  for (int i = 0; i < kStateCount; ++i) {
    s->blocks[i] = state_blocks_[i];
    s->bytes[i] = state_bytes_[i];
  }
  for (int i = 0; i < 8; ++i) s->class_bytes[i] = lifetime_bytes_[i];
  s->cached_bytes = cache_.bytes();
  s->cached_blocks = cache_.count();
  s->spills_aborted = aborted_;
  s->fenced_moves = fenced_moves_;
  s->fence_waits = fence_waits_;
  s->fence_wait_ns = fence_wait_ns_;
  s->spills_refused_host_full = host_full_;
  s->rescues = rescues_;
}

}  // namespace tierrt::alloc
