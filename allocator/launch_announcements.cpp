#include "launch_announcements.h"

#include <cassert>

#include "asymmetric_fence.h"

namespace tierrt::alloc {

namespace {

// seq: even while idle, odd while a launch is announced. Everything atomic:
// takers read slots while their threads write them.
struct alignas(64) Slot {
  std::atomic<std::uint64_t> seq{0};
  std::atomic<std::uint32_t> count{0};
  std::atomic<bool> taken{false};
  std::atomic<const Block*> blocks[LaunchAnnouncements::kBlocks] = {};
};

Slot g_slots[LaunchAnnouncements::kSlots];
std::atomic<std::size_t> g_high{0};  // slots below it may have been taken

// Read at every launch (begin and end). Initial-exec: in libtierrt.so the
// default model reaches a thread-local through a call to __tls_get_addr at
// each access (1.4 ns more per access than this one load, in a loop on a
// 2.1 GHz EPYC VM). The library's TLS is static already (its dynamic
// FLAGS say STATIC_TLS), so this asks nothing more of the loader.
__attribute__((tls_model("initial-exec"))) thread_local Slot* t_slot = nullptr;
// Claimed, or found none: not tried again.
__attribute__((tls_model("initial-exec"))) thread_local bool t_claimed_once = false;

// Gives the slot back when the thread exits (no launch is announced then).
struct SlotReturn {
  ~SlotReturn() {
    if (t_slot == nullptr) return;
    assert((t_slot->seq.load(std::memory_order_relaxed) & 1) == 0);
    t_slot->taken.store(false, std::memory_order_release);
    t_slot = nullptr;
  }
};

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

}  // namespace

bool LaunchAnnouncements::begin(std::span<Block* const> blocks) noexcept {
  if (blocks.size() > kBlocks) return false;
  Slot* s = t_slot;
  if (s == nullptr && (t_claimed_once || (s = claim()) == nullptr)) return false;
  const std::uint64_t seq = s->seq.load(std::memory_order_relaxed);
  if (seq & 1) return false;  // this thread announced a launch already
  // Release: a taker that reads a block written here also sees the uses the
  // thread's earlier launches recorded (their ends come before).
  for (std::size_t i = 0; i < blocks.size(); ++i) s->blocks[i].store(blocks[i], std::memory_order_release);
  s->count.store(static_cast<std::uint32_t>(blocks.size()), std::memory_order_relaxed);
  // Ordered before the caller looks at the blocks' states; the taker's side
  // of the barrier is in announced() (asymmetric_fence.h).
  asymmetric_fence::light_store(s->seq, seq + 1);
  return true;
}

void LaunchAnnouncements::end() noexcept {
  Slot* s = t_slot;
  assert(s != nullptr && (s->seq.load(std::memory_order_relaxed) & 1) == 1);
  // A rescue waiting for launches to let go is told after this
  // (BlockStates::pins_released: store, then look; the rescue's side of the
  // barrier is in for_each_announced).
  asymmetric_fence::light_store(s->seq, s->seq.load(std::memory_order_relaxed) + 1);
}

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
