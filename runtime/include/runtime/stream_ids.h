// The streams work arrives on, as tierrt tells them apart.
//
// key(): what the engine hands the allocator and the ids for a stream the
// application named. The driver's two default-stream handles mean different
// things per call: the legacy default stream (NULL or CU_STREAM_LEGACY) is
// one stream for the whole context, while CU_STREAM_PER_THREAD is the
// calling thread's own stream, so every thread's gets a key of its own
// (driver/stream_key.h), which TIERRT_CU turns back into the handle. The
// legacy stream also synchronizes implicitly with every blocking stream
// (CUDA driver API, "Stream synchronization behavior"); tierrt orders work
// only through the use events it records and waits on, which holds whatever
// the implicit ordering, so that ordering is not modelled, only identity.
//
// id(): small stable ids, as the policy's events carry them: the planner
// and the recording see the same id for a stream, whether or not anything
// is recorded. Lock-free: a launch pays one hash probe.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "driver/stream_key.h"
#include "policies/event.hpp"

namespace tierrt {

class StreamIds {
 public:
  // The stream `s` names on the calling thread.
  static CUstream key(CUstream s) noexcept {
    if (s == CU_STREAM_PER_THREAD) return this_thread_key();
    return s == nullptr ? CU_STREAM_LEGACY : s;
  }

  // 0 for the legacy default stream; 1.. for the others (keys) in the order
  // first seen; past kMax they share kMax + 1.
  policy::StreamId id(CUstream key) noexcept {
    return key == nullptr || key == CU_STREAM_LEGACY ? 0 : find_or_add(key);
  }

  static constexpr policy::StreamId kMax = 255;

 private:
  static CUstream this_thread_key() noexcept;
  policy::StreamId find_or_add(CUstream s) noexcept;

  static constexpr std::uint32_t kSlots = 512;  // a power of two, twice kMax
  std::atomic<CUstream> keys_[kSlots] = {};
  std::atomic<policy::StreamId> ids_[kSlots] = {};  // 0 until the slot's claimer numbers it
  std::atomic<policy::StreamId> seen_{0};
};

}  // namespace tierrt
