// Launch residency: what the runtime calls around every launch, copy and
// memset (ensure_resident, enqueue, record_use, release), and user pins.
#include "parts.h"
#include "steady_clock.h"
#include "driver/driver.h"

namespace tierrt::alloc {

CUresult Allocator::ensure_resident(std::span<Block* const> blocks, CUstream stream) noexcept {
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    Block* b = blocks[i];
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
      release(blocks.first(i));
      return r;
    }
  }
  return CUDA_SUCCESS;
}

void Allocator::release(std::span<Block* const> blocks) noexcept {
  for (Block* b : blocks) b->pins.fetch_sub(1, std::memory_order_seq_cst);
  p_->blocks.pins_released();
}

CUresult Allocator::record_use(std::span<Block* const> blocks, CUstream stream, bool capturing) noexcept {
  if (!capturing) return p_->uses.record(blocks, stream);
  auto l = p_->blocks.lock();
  for (Block* b : blocks) b->captured = true;
  return CUDA_SUCCESS;
}

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

CUresult Allocator::Parts::make_resident(Block* b, CUstream s, std::span<Block* const> pinned) noexcept {
  UseEvent* ready = nullptr;
  CUresult r = pin_when_usable(b, pinned, &ready);
  if (r != CUDA_SUCCESS || ready == nullptr) return r;
  note_late_fetch(b, ready);
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

void Allocator::Parts::note_late_fetch(Block* b, UseEvent* ready) noexcept {
  // A prefetch still under way when a launch needs it is late: the mover
  // reports by how much once it completes.
  if (b->needed_since.load(std::memory_order_relaxed) != 0 || mover->observer() == nullptr) return;
  if (TIERRT_CU(cuEventQuery, ready->ev) != CUDA_ERROR_NOT_READY) return;
  std::uint64_t none = 0;
  b->needed_since.compare_exchange_strong(none, steady_ns(), std::memory_order_relaxed);
}

}  // namespace tierrt::alloc
