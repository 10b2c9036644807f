// Small stable ids for the streams work arrives on, as the policy's events
// carry them: the planner and the recording see the same id for a stream,
// whether or not anything is recorded. Lock-free: a launch pays a scan of
// the streams seen so far (a handful in a training job).
#pragma once

#include <cuda.h>

#include <atomic>

#include "policies/event.hpp"

namespace tierrt {

class StreamIds {
 public:
  // 0 for the legacy default stream (and NULL, which means it); 1.. for the
  // others in the order first seen; past kMax they share the last id.
  policy::StreamId id(CUstream s) noexcept {
    return s == nullptr || s == CU_STREAM_LEGACY ? 0 : find_or_add(s);
  }

  static constexpr policy::StreamId kMax = 255;

 private:
  policy::StreamId find_or_add(CUstream s) noexcept;
  std::atomic<CUstream> streams_[kMax] = {};
};

}  // namespace tierrt
