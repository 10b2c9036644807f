// A word one thread sleeps on and others wake it through, with no lock on
// the waking side.
//
// The policy thread sleeps between its turns, and a launching thread wakes
// it (a post to a napping thread, a step marker). Through a mutex and a
// condition variable the waker had to take the sleeper's mutex, and a
// launching thread that found it held (by the policy thread just woken, or
// about to sleep) slept in the kernel itself (seen in launch_hook_bench's
// scheduler traces). Here a wake is one atomic increment, and one futex
// call only while a thread sleeps on the word.
//
// No wake is lost: the sleeper reads epoch() before it looks at what it
// waits for; a waker makes that visible first, then calls wake(). Where the
// sleeper's look missed it, the increment comes after the sleeper's read of
// the epoch, and sleep() returns at once (the kernel compares the word under
// its own lock before it sleeps).
#pragma once

#include <atomic>
#include <cstdint>

namespace tierrt {

class WakeWord {
 public:
  std::uint32_t epoch() const noexcept { return word_.load(std::memory_order_seq_cst); }
  // Sleeps while the word is still `epoch`, for at most `timeout_ns` (0: no
  // limit). May return early (a signal): the caller looks again.
  void sleep(std::uint32_t epoch, std::uint64_t timeout_ns) noexcept;
  // Ends every sleep on an epoch before this call.
  void wake() noexcept;
  // Futex wake calls made: wake() found a sleeper (for tests).
  std::uint64_t wake_calls() const noexcept { return wake_calls_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint32_t> word_{0};
  // Threads in sleep(): a wake with none makes no system call. Incremented
  // before the sleeper's last look at the word, read after the waker's
  // increment (both sequentially consistent): a waker that reads 0 made its
  // increment before that look, which then sees it.
  std::atomic<std::uint32_t> sleepers_{0};
  std::atomic<std::uint64_t> wake_calls_{0};
};

}  // namespace tierrt
