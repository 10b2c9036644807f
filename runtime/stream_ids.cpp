#include "runtime/stream_ids.h"

namespace tierrt {

namespace {

std::uint32_t slot_of(CUstream s) noexcept {
  const auto v = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(s));
  return static_cast<std::uint32_t>((v * 0x9E3779B97F4A7C15ull) >> 40);
}

}  // namespace

CUstream StreamIds::this_thread_key() noexcept { return drv::this_thread_stream_key(); }

policy::StreamId StreamIds::find_or_add(CUstream s) noexcept {
  std::uint32_t h = slot_of(s);
  for (std::uint32_t probe = 0; probe < kSlots; ++probe, ++h) {
    std::atomic<CUstream>& slot = keys_[h & (kSlots - 1)];
    CUstream seen = slot.load(std::memory_order_acquire);
    if (seen == nullptr && slot.compare_exchange_strong(seen, s, std::memory_order_acq_rel)) {
      const policy::StreamId n = seen_.fetch_add(1, std::memory_order_relaxed) + 1;
      const policy::StreamId id = n <= kMax ? n : kMax + 1;
      ids_[h & (kSlots - 1)].store(id, std::memory_order_release);
      return id;
    }
    if (seen != s) continue;
    // Ours, or another thread's claim of this slot for s: wait for its number.
    policy::StreamId id;
    while ((id = ids_[h & (kSlots - 1)].load(std::memory_order_acquire)) == 0) {
    }
    return id;
  }
  return kMax + 1;
}

}  // namespace tierrt
