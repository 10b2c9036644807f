#include "runtime/policy_thread.h"

#include <chrono>
#include <thread>

#include "driver/driver.h"
#include "policies/link_model.hpp"
#include "policies/policy_engine.hpp"
#include "runtime/log.h"

namespace tierrt {

namespace {

std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace

PolicyThread::PolicyThread(alloc::Allocator& allocator, CUcontext ctx, std::uint64_t budget)
    : allocator_(allocator), ctx_(ctx), ring_(new Slot[kSlots]) {
  for (std::uint64_t i = 0; i < kSlots; ++i) ring_[i].turn.store(i, std::memory_order_relaxed);
  policy::PolicyEngine::Options o;
  o.budget = budget;
  o.link = policy::parse_link("pcie5");
  engine_ = std::make_unique<policy::PolicyEngine>(o);
  std::thread([this] { run(); }).detach();  // lives as long as the process
}

PolicyThread::~PolicyThread() = default;

// Multi-producer ring: each slot's turn says whose write or read is next.
void PolicyThread::post(const policy::Event& e) noexcept {
  std::uint64_t pos = head_.load(std::memory_order_relaxed);
  for (;;) {
    Slot& s = ring_[pos & (kSlots - 1)];
    std::uint64_t turn = s.turn.load(std::memory_order_acquire);
    if (turn == pos) {
      if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        s.event = e;
        s.ns = steady_ns();
        s.turn.store(pos + 1, std::memory_order_release);
        break;
      }
    } else if (turn < pos + 1) {
      dropped_.fetch_add(1, std::memory_order_relaxed);  // full: the plan degrades, nothing breaks
      return;
    } else {
      pos = head_.load(std::memory_order_relaxed);
    }
  }
  if (sleeping_.load(std::memory_order_acquire)) {
    std::lock_guard lock(mu_);
    cv_.notify_one();
  }
}

bool PolicyThread::take(policy::Event* e, std::uint64_t* ns) noexcept {
  Slot& s = ring_[tail_ & (kSlots - 1)];
  if (s.turn.load(std::memory_order_acquire) != tail_ + 1) return false;
  *e = s.event;
  *ns = s.ns;
  s.turn.store(tail_ + kSlots, std::memory_order_release);
  ++tail_;
  return true;
}

void PolicyThread::run() {
  drv::table().cuCtxSetCurrent(ctx_);
  policy::Event e;
  std::uint64_t ns = 0;
  for (;;) {
    while (take(&e, &ns)) feed(e, ns);
    std::unique_lock lock(mu_);
    sleeping_.store(true, std::memory_order_release);
    // Re-check after announcing sleep, so a post in between is not missed.
    cv_.wait_for(lock, std::chrono::milliseconds(5), [&] {
      return ring_[tail_ & (kSlots - 1)].turn.load(std::memory_order_acquire) == tail_ + 1;
    });
    sleeping_.store(false, std::memory_order_release);
  }
}

void PolicyThread::feed(const policy::Event& e, std::uint64_t ns) {
  using policy::EventKind;
  if (e.kind == EventKind::Use && held_) {
    held_uses_.push_back(e);
    return;
  }
  if (held_) {
    // The next event tells how long the held launch ran before it.
    held_launch_.b = ns - held_ns_;
    record_launch_held();
  }
  if (e.kind == EventKind::Launch) {
    held_ = true;
    held_launch_ = e;
    held_ns_ = ns;
    held_uses_.clear();
    return;
  }
  engine_->record(e);
}

void PolicyThread::record_launch_held() {
  held_ = false;
  // The triggers of the launch about to be recorded: prefetches fire as it
  // is issued, spills once it (the block's last use before its idle gap) is
  // enqueued; the allocator's spill waits for that use on the device.
  const auto slice = engine_->triggers_for_next_launch();
  triggers_.assign(slice.begin(), slice.end());
  act(policy::Action::Prefetch);
  engine_->record(held_launch_);
  for (const policy::Event& u : held_uses_) engine_->record(u);
  act(policy::Action::Spill);
}

alloc::Block* PolicyThread::block_for(std::uint32_t ordinal) const {
  auto id = engine_->block_of(ordinal);
  if (!id) return nullptr;
  alloc::Block* b = allocator_.lookup(*id);
  return b && b->va == *id ? b : nullptr;
}

void PolicyThread::act(policy::Action action) {
  for (const policy::Trigger& t : triggers_) {
    if (t.action != action) continue;
    alloc::Block* b = block_for(t.ordinal);
    if (!b) continue;
    const alloc::State st = b->st();
    if (action == policy::Action::Prefetch && (st == alloc::State::Spilled || st == alloc::State::Spilling)) {
      if (allocator_.prefetch(b, nullptr) == CUDA_SUCCESS) prefetches_.fetch_add(1, std::memory_order_relaxed);
    } else if (action == policy::Action::Spill && st == alloc::State::Resident) {
      if (allocator_.spill(b) == alloc::SpillResult::Started) spills_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace tierrt
