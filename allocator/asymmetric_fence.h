// Store-then-load pairings in which one side runs at every launch and the
// other rarely (launch_announcements.h: a launch announces its blocks, then
// looks at their states; a spill's claim publishes SPILLING, then looks at
// the announcements). Each side needs a full barrier between its store and
// its load, and on x86 that is a locked instruction (10-18 ns) at every
// launch. Instead the frequent side orders them with a compiler barrier
// only, and the rare side makes every running thread of the process execute
// a full barrier (membarrier(2), private expedited: a few microseconds). A
// thread that is not running passed one when it was switched out.
//
// Where membarrier cannot be registered (an old kernel, a sandbox that
// filters it) and in TSan builds (which do not see membarrier's barriers),
// both sides' stores and loads are sequentially consistent, as before.
//
// The mode is chosen once, while the library loads, before any launch:
// never flipped while launches run, where a light side could meet a heavy
// side that did not barrier.
#pragma once

#include <atomic>

namespace tierrt::alloc::asymmetric_fence {

namespace detail {
extern std::atomic<bool> g_membarrier;
}

// The frequent side's store, ordered before the loads that follow it: a
// release store and a compiler barrier with membarrier, else a sequentially
// consistent store (the rare side's loads are sequentially consistent too).
// No standalone fence: TSan does not model one (GCC refuses to build it).
template <class T>
inline void light_store(std::atomic<T>& a, T v) noexcept {
  if (detail::g_membarrier.load(std::memory_order_relaxed)) {
    a.store(v, std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    a.store(v, std::memory_order_seq_cst);
  }
}

// Between the rare side's store (sequentially consistent) and its loads
// (sequentially consistent). False where the barrier could not be made (the
// kernel refused both membarrier commands after registering one): the
// caller must then assume the other side's store was not seen.
bool heavy() noexcept;

// Whether the light side's store is followed only by a compiler barrier
// (tests).
inline bool membarrier_in_use() noexcept { return detail::g_membarrier.load(std::memory_order_relaxed); }

}  // namespace tierrt::alloc::asymmetric_fence
