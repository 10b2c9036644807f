#include "runtime/stream_ids.h"

namespace tierrt {

policy::StreamId StreamIds::find_or_add(CUstream s) noexcept {
  for (policy::StreamId i = 0; i < kMax; ++i) {
    CUstream seen = streams_[i].load(std::memory_order_acquire);
    if (seen == nullptr && streams_[i].compare_exchange_strong(seen, s, std::memory_order_acq_rel)) return i + 1;
    if (seen == s) return i + 1;  // ours, or another thread's claim of this slot for s
  }
  return kMax + 1;
}

}  // namespace tierrt
