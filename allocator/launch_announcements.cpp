#include "launch_announcements.h"

#include <cassert>

#include "asymmetric_fence.h"

namespace tierrt::alloc {

namespace {

using announcement_detail::Slot;
using announcement_detail::t_claimed_once;
using announcement_detail::t_slot;

Slot g_slots[LaunchAnnouncements::kSlots];
std::atomic<std::size_t> g_high{0};  // slots below it may have been taken

// Gives the slot back when the thread exits (no launch is announced then).
struct SlotReturn {
  ~SlotReturn() {
    if (t_slot == nullptr) return;
    assert((t_slot->seq.load(std::memory_order_relaxed) & 1) == 0);
    t_slot->taken.store(false, std::memory_order_release);
    t_slot = nullptr;
  }
};

}  // namespace

namespace announcement_detail {

constinit __attribute__((tls_model("initial-exec"))) thread_local Slot* t_slot = nullptr;
constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_claimed_once = false;

Slot* claim() noexcept {
  t_claimed_once = true;
  for (std::size_t i = 0; i < LaunchAnnouncements::kSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.taken.load(std::memory_order_relaxed) || s.taken.exchange(true, std::memory_order_acquire)) continue;
    std::size_t high = g_high.load(std::memory_order_relaxed);
    while (high < i + 1 && !g_high.compare_exchange_weak(high, i + 1, std::memory_order_release)) {
    }
    // Its destructor runs at thread exit. Registering it may allocate in the
    // C library: once per thread, at its first announced launch.
    static thread_local SlotReturn returned;
    (void)returned;
    t_slot = &s;
    return &s;
  }
  return nullptr;
}

}  // namespace announcement_detail

namespace {

// The blocks of the launch slot `s` holds active, into `out`; 0 when it is
// idle or its launch ended while they were read (then they may be a later
// launch's).
std::uint32_t read_active(const Slot& s, const Block** out) noexcept {
  // Sequentially consistent: without membarrier, the pairing is the two
  // sides' seq_cst stores and loads.
  const std::uint64_t seq = s.seq.load(std::memory_order_seq_cst);
  if ((seq & 1) == 0) return 0;
  std::uint32_t n = s.count.load(std::memory_order_relaxed);
  if (n > LaunchAnnouncements::kBlocks) n = LaunchAnnouncements::kBlocks;
  for (std::uint32_t j = 0; j < n; ++j) out[j] = s.blocks[j].load(std::memory_order_acquire);
  // The blocks' loads are acquire: this load cannot come before them.
  return s.seq.load(std::memory_order_acquire) == seq ? n : 0;
}

}  // namespace

bool LaunchAnnouncements::announced(const Block* b) noexcept {
  // Without the barrier a launch's announcement may not be seen yet: the
  // block is taken as held (a spill comes back busy), never as free.
  if (!asymmetric_fence::heavy()) return true;
  const std::size_t high = g_high.load(std::memory_order_acquire);
  const Block* named[kBlocks];
  for (std::size_t i = 0; i < high; ++i) {
    const std::uint32_t n = read_active(g_slots[i], named);
    for (std::uint32_t j = 0; j < n; ++j)
      if (named[j] == b) return true;
  }
  return false;
}

bool LaunchAnnouncements::for_each_announced(void (*fn)(const Block*, void*), void* ctx) noexcept {
  if (!asymmetric_fence::heavy()) return false;
  const std::size_t high = g_high.load(std::memory_order_acquire);
  const Block* named[kBlocks];
  for (std::size_t i = 0; i < high; ++i) {
    const std::uint32_t n = read_active(g_slots[i], named);
    for (std::uint32_t j = 0; j < n; ++j) fn(named[j], ctx);
  }
  return true;
}

std::size_t LaunchAnnouncements::slots_in_use() noexcept {
  std::size_t n = 0;
  const std::size_t high = g_high.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < high; ++i) n += g_slots[i].taken.load(std::memory_order_relaxed);
  return n;
}

}  // namespace tierrt::alloc
