#include "asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tierrt::alloc::asymmetric_fence {

namespace {

long membarrier(int cmd) noexcept { return syscall(__NR_membarrier, cmd, 0u, 0); }

bool register_membarrier() noexcept {
#if defined(__SANITIZE_THREAD__)
  return false;  // TSan would report the light side's plain stores as races
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return false;
#endif
#endif
  const long supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0 ||
      (supported & MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0)
    return false;
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

}  // namespace

namespace detail {
// Decided during static initialisation, before any thread launches.
std::atomic<bool> g_membarrier{register_membarrier()};
}  // namespace detail

bool heavy() noexcept {
  if (!detail::g_membarrier.load(std::memory_order_relaxed)) return true;  // both sides are seq_cst
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // Registered for this process: the private command does not fail. The
  // global one (slower: it waits for every CPU to pass a quiescent state)
  // is the fallback all the same. The call is a full barrier for this
  // thread too.
  const bool ok = membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0 || membarrier(MEMBARRIER_CMD_GLOBAL) == 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  return ok;
}

}  // namespace tierrt::alloc::asymmetric_fence
