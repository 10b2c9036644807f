// Launch residency: what the runtime calls around every launch, copy and
// memset (ensure_resident, enqueue, record_use, release), and user pins.
#include <cassert>

#include "launch_announcements.h"
#include "parts.h"
#include "steady_clock.h"
#include "driver/driver.h"

namespace tierrt::alloc {

namespace {

// Debug builds count the launches past their groups' fence checks
// (Group::enqueuing), so that a move can assert that none is under way.
void note_enqueuing([[maybe_unused]] std::span<Block* const> list) noexcept {
#ifndef NDEBUG
  for (Block* b : list)
    if (is_group_record(b)) b->group->enqueuing.fetch_add(1, std::memory_order_seq_cst);
#endif
}

}  // namespace

void note_enqueued([[maybe_unused]] Block* b) noexcept {
#ifndef NDEBUG
  if (is_group_record(b)) b->group->enqueuing.fetch_sub(1, std::memory_order_seq_cst);
#endif
}

CUresult Allocator::ensure_resident(std::span<Block* const> blocks, CUstream stream) noexcept {
  // A granule group named for the first time: every member mapped first,
  // with nothing pinned (a kernel may reach any of them).
  bool groups = false;
  for (Block* b : blocks) {
    if (!is_group_record(b)) continue;
    groups = true;
    if (b->group->untouched.load(std::memory_order_acquire) != 0)
      if (const CUresult r = p_->touch_group(b->group); r != CUDA_SUCCESS) return r;
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    Block* b = blocks[i];
    if (groups && is_group_record(b)) continue;  // pinned last
    // Fast path: resident, no fetch pending. Pin first, then look (pairs
    // with a spill's claim: publish SPILLING, then look at pins).
    b->pins.fetch_add(1, std::memory_order_seq_cst);
    if (b->state.load(std::memory_order_seq_cst) == State::Resident &&
        b->ready.load(std::memory_order_acquire) == nullptr)
      continue;
    b->pins.fetch_sub(1, std::memory_order_seq_cst);
    p_->blocks.pins_released();  // a rescue may have seen that pin
    const CUresult r = p_->make_resident(b, stream, blocks.first(i));
    if (r != CUDA_SUCCESS) {
      p_->release_pinned(blocks.first(i), /*records=*/false);
      return r;
    }
  }
  return groups ? p_->pin_groups(blocks, stream) : CUDA_SUCCESS;
}

CUresult Allocator::ensure_resident_briefly(std::span<Block* const> blocks, CUstream stream, bool* announced) noexcept {
  *announced = false;
  if (blocks.empty()) return CUDA_SUCCESS;  // nothing to announce (nor to release)
  if (!LaunchAnnouncements::begin(blocks)) return ensure_resident(blocks, stream);
  // Announce, then look (pairs with a spill's claim: publish SPILLING, then
  // look at pins and announcements). A slab's use record is pinned all the
  // same: its slab's release looks at pins only. A granule group's record
  // takes the pinning path (its members are mapped and fenced there): found
  // in the same pass, it ends the announcement, which held off spills for
  // that long only.
  std::size_t i = 0;
  for (; i < blocks.size(); ++i) {
    Block* b = blocks[i];
    if (b->slab) {
      if (b->group != nullptr) break;
      b->pins.fetch_add(1, std::memory_order_seq_cst);
    }
    if (b->state.load(std::memory_order_seq_cst) != State::Resident ||
        b->ready.load(std::memory_order_acquire) != nullptr) {
      if (b->slab) b->pins.fetch_sub(1, std::memory_order_seq_cst);
      break;
    }
  }
  if (i == blocks.size()) {
    *announced = true;
    return CUDA_SUCCESS;
  }
  // One is not resident yet: the pinning path, which may wait (a fetch).
  for (Block* b : blocks.first(i))
    if (b->slab) b->pins.fetch_sub(1, std::memory_order_seq_cst);
  LaunchAnnouncements::end();
  p_->blocks.pins_released();
  return ensure_resident(blocks, stream);
}

void Allocator::release(std::span<Block* const> blocks, bool announced, bool slabs) noexcept {
  // An announced launch naming no slab's record pinned nothing: the walk
  // is the debug builds' count only.
#ifdef NDEBUG
  if (!announced || slabs)
#endif
    for (Block* b : blocks) {
      assert(slabs || !b->slab);
      note_enqueued(b);
      if (!announced || b->slab) b->pins.fetch_sub(1, std::memory_order_seq_cst);
    }
  if (announced) LaunchAnnouncements::end();
  p_->blocks.pins_released();
}

CUresult Allocator::record_use(std::span<Block* const> blocks, CUstream stream, bool capturing, bool lazy) noexcept {
  if (!capturing) return p_->uses.record(blocks, stream, lazy);
  auto l = p_->blocks.lock();
  for (Block* b : blocks) b->captured = true;
  return CUDA_SUCCESS;
}

void Allocator::flush_uses(CUstream stream, bool stream_destroyed) noexcept {
  p_->uses.flush(stream, stream_destroyed);
}

void Allocator::set_background_use_records(bool on) noexcept { p_->uses.set_background_records(on); }
void Allocator::record_aged_uses() noexcept { p_->uses.record_aged(); }

CUresult Allocator::pin(Block* b, CUstream stream) noexcept {
  if (b == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Block* one[] = {b};
  const CUresult r = ensure_resident(one, stream);
  if (r != CUDA_SUCCESS) return r;
  {
    auto l = p_->blocks.lock();
    ++b->user_pins;  // spills look at it under this lock
  }
  release(one);
  return CUDA_SUCCESS;
}

bool Allocator::unpin(Block* b) noexcept {
  if (b == nullptr) return false;
  {
    auto l = p_->blocks.lock();
    if (b->user_pins == 0) return false;
    --b->user_pins;
  }
  p_->blocks.pins_released();
  return true;
}

void Allocator::Parts::release_pinned(std::span<Block* const> list, bool records) noexcept {
  for (Block* b : list)
    if (is_group_record(b) == records) {
      note_enqueued(b);
      b->pins.fetch_sub(1, std::memory_order_seq_cst);
    }
  blocks.pins_released();
}

// The groups' pins come last, once the members are resident, so that a
// thread holding one is only enqueueing: a fence waiting for them to go never
// waits for a thread that waits itself.
CUresult Allocator::Parts::pin_groups(std::span<Block* const> list, CUstream s) noexcept {
  for (;;) {
    const Group* fenced = nullptr;
    bool freed = false;
    std::size_t i = 0;
    for (; i < list.size() && fenced == nullptr && !freed; ++i) {
      Block* r = list[i];
      if (!is_group_record(r)) continue;
      // Pin, then look (pairs with a move: raise the fence, then wait for no pins).
      r->pins.fetch_add(1, std::memory_order_seq_cst);
      freed = r->state.load(std::memory_order_seq_cst) != State::Resident;
      if (!freed && r->group->fence.load(std::memory_order_seq_cst) != 0) fenced = r->group;
      if (freed || fenced != nullptr) r->pins.fetch_sub(1, std::memory_order_seq_cst);
    }
    if (fenced == nullptr && !freed) {
      note_enqueuing(list);
      break;
    }
    for (Block* r : list.first(i - 1))  // not past the check: not counted as enqueuing
      if (is_group_record(r)) r->pins.fetch_sub(1, std::memory_order_seq_cst);
    blocks.pins_released();
    if (freed) {  // the group was freed since it was named: as a freed block
      release_pinned(list, /*records=*/false);
      return CUDA_ERROR_INVALID_VALUE;
    }
    auto l = blocks.lock();
    blocks.wait_unfenced(fenced, l, list);
  }
  // A member fetched for another launch may be reached by this one: its
  // stream waits for the group's newest fetch (the fetch stream is in order).
  for (Block* r : list) {
    if (!is_group_record(r) || r->ready.load(std::memory_order_acquire) == nullptr) continue;
    UseEvent* ready = nullptr;
    {
      auto l = blocks.lock();
      ready = r->ready.load();
      if (ready != nullptr) UseTracker::ref(ready);
    }
    if (ready == nullptr) continue;
    CUresult e = TIERRT_CU(cuStreamWaitEvent, s, ready->ev, 0u);
    if (e != CUDA_SUCCESS) e = UseTracker::wait_host(UseSlot{mover->fetch_stream(), ready});
    uses.unref(ready);
    if (e != CUDA_SUCCESS) {
      release_pinned(list, true);
      release_pinned(list, false);
      return e;
    }
  }
  return CUDA_SUCCESS;
}

CUresult Allocator::Parts::make_resident(Block* b, CUstream s, std::span<Block* const> pinned) noexcept {
  UseEvent* ready = nullptr;
  CUresult r = pin_when_usable(b, pinned, &ready);
  if (r != CUDA_SUCCESS || ready == nullptr) return r;
  note_late_fetch(b, ready, s);
  // A stream that cannot wait on the fetch gets it done before the work is
  // enqueued: the host waits.
  if (TIERRT_CU(cuStreamWaitEvent, s, ready->ev, 0u) != CUDA_SUCCESS)
    r = UseTracker::wait_host(UseSlot{mover->fetch_stream(), ready});
  uses.unref(ready);
  if (r != CUDA_SUCCESS) {
    b->pins.fetch_sub(1, std::memory_order_seq_cst);
    blocks.pins_released();
  }
  return r;
}

CUresult Allocator::Parts::pin_when_usable(Block* b, std::span<Block* const> pinned, UseEvent** ready) noexcept {
  auto l = blocks.lock();
  for (;;) {
    if (b->untouched) {  // a granule group's member, used for the first time
      l.unlock();
      const CUresult r = touch_member(b, pinned);
      l.lock();
      if (r != CUDA_SUCCESS) return r;
      continue;
    }
    const State st = blocks.settle(b, l, pinned);
    if (st == State::Freed) return CUDA_ERROR_INVALID_VALUE;
    if (st == State::Resident || st == State::Fetching) {
      b->pins.fetch_add(1, std::memory_order_seq_cst);
      *ready = b->ready.load();
      if (*ready != nullptr) UseTracker::ref(*ready);
      return CUDA_SUCCESS;
    }
    // SPILLED: a demand fetch (without the lock), then look again.
    l.unlock();
    const CUresult r = mover->fetch(b, nullptr, true, pinned);
    l.lock();
    if (r != CUDA_SUCCESS && b->st() == State::Spilled) {
      // The fetch failed and left the block where its bytes are. On its host
      // copy (remap) it is still correct over the link, only slower; with
      // nothing at its VA (copy mode) the launch gets the driver's error.
      if (!b->va_on_host) return r;
      b->pins.fetch_add(1, std::memory_order_seq_cst);
      return CUDA_SUCCESS;
    }
  }
}

void Allocator::Parts::note_late_fetch(Block* b, UseEvent* ready, CUstream s) noexcept {
  // A prefetch still under way when a launch is enqueued may be late: once
  // it completes, the mover reports by how much the launch's stream got
  // there first (an application far ahead of the device enqueues launches
  // long before their stream runs them: that alone makes nothing late).
  // A demand fetch's launch is marked the same way: did its stream wait?
  if (mover->observer() == nullptr || b->late_marker.load(std::memory_order_relaxed) != nullptr) return;
  std::uint64_t since = b->needed_since.load(std::memory_order_relaxed);
  if (since > kNeededOnDemand) return;  // another launch marked it first
  if (TIERRT_CU(cuEventQuery, ready->ev) != CUDA_ERROR_NOT_READY) return;
  if (since == 0 && !b->needed_since.compare_exchange_strong(since, steady_ns(), std::memory_order_relaxed)) return;
  // Not into a capture: the marker would become a node of the graph.
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (TIERRT_CU(cuStreamIsCapturing, s, &capturing) != CUDA_SUCCESS || capturing != CU_STREAM_CAPTURE_STATUS_NONE)
    return;
  CUevent none = nullptr, marker = uses.mark(s);
  if (!b->late_marker.compare_exchange_strong(none, marker, std::memory_order_acq_rel)) uses.release_mark(marker);
}

}  // namespace tierrt::alloc
