// Per-thread default streams, told apart. The driver knows every thread's
// per-thread default stream by one handle, CU_STREAM_PER_THREAD, and
// resolves it on the calling thread; tierrt must tell them apart (a use on
// one thread's stream is not ordered with another thread's work). tierrt
// therefore names each thread's per-thread default stream by a key of its
// own, a value no driver handle takes (stream handles are aligned pointers,
// and the driver's special handles are 0x1 and 0x2), and every call through
// TIERRT_CU turns a key back into CU_STREAM_PER_THREAD. Such a call must be
// made on the key's own thread, as the driver would resolve the handle.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

namespace tierrt::drv {

inline constexpr std::uintptr_t kPerThreadKeyTag = 0x6, kPerThreadKeyMask = 0xf;

// The key of the per-thread default stream of the thread numbered `n` (>= 1).
inline CUstream per_thread_stream_key(std::uint64_t n) noexcept {
  return reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(n << 4) | kPerThreadKeyTag);
}
inline bool is_per_thread_stream_key(CUstream s) noexcept {
  return (reinterpret_cast<std::uintptr_t>(s) & kPerThreadKeyMask) == kPerThreadKeyTag;
}

namespace detail {
inline std::atomic<std::uint64_t> threads_keyed{0};
inline thread_local CUstream this_thread_key = nullptr;
}  // namespace detail

// The calling thread's key, made on first use.
inline CUstream this_thread_stream_key() noexcept {
  if (detail::this_thread_key == nullptr)
    detail::this_thread_key = per_thread_stream_key(detail::threads_keyed.fetch_add(1, std::memory_order_relaxed) + 1);
  return detail::this_thread_key;
}
// Another thread's per-thread default stream: the calling thread cannot
// name it to the driver (CU_STREAM_PER_THREAD would mean its own).
inline bool is_foreign_stream_key(CUstream s) noexcept {
  return is_per_thread_stream_key(s) && s != this_thread_stream_key();
}
// A stream handle of its own, not the legacy stream or a per-thread
// default stream (which the driver resolves on the calling thread's
// current context).
inline bool names_a_stream(CUstream s) noexcept {
  return s != nullptr && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD && !is_per_thread_stream_key(s);
}
// What the driver is given for a stream tierrt names by `s`.
inline CUstream driver_stream(CUstream s) noexcept {
  return is_per_thread_stream_key(s) ? CU_STREAM_PER_THREAD : s;
}

}  // namespace tierrt::drv
