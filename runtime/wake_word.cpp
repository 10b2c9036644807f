#include "runtime/wake_word.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace tierrt {

namespace {

// A std::atomic<std::uint32_t> is the futex word itself (same size and
// representation, lock-free), as C++20's atomic wait relies on too.
std::uint32_t* futex_address(std::atomic<std::uint32_t>& w) noexcept { return reinterpret_cast<std::uint32_t*>(&w); }

}  // namespace

void WakeWord::sleep(std::uint32_t epoch, std::uint64_t timeout_ns) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
                std::atomic<std::uint32_t>::is_always_lock_free);
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  if (word_.load(std::memory_order_seq_cst) == epoch) {
    timespec limit{};
    limit.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000);
    limit.tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000);
    // Relative timeout. EAGAIN (the word moved), EINTR and ETIMEDOUT all end
    // the sleep: the caller looks again either way.
    (void)syscall(SYS_futex, futex_address(word_), FUTEX_WAIT_PRIVATE, epoch, timeout_ns != 0 ? &limit : nullptr,
                  nullptr, 0);
  }
  sleepers_.fetch_sub(1, std::memory_order_release);
}

void WakeWord::wake() noexcept {
  word_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
  wake_calls_.fetch_add(1, std::memory_order_relaxed);
  (void)syscall(SYS_futex, futex_address(word_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace tierrt
