#include "runtime/device_clock.h"

#include "driver/driver.h"

namespace tierrt {

DeviceClock::DeviceClock() noexcept {
  for (CUevent& e : events_)
    if (TIERRT_CU(cuEventCreate, &e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      e = nullptr;
      return;
    }
  ok_ = true;
}

DeviceClock::~DeviceClock() {
  for (CUevent e : events_)
    if (e) (void)TIERRT_CU(cuEventDestroy, e);
}

bool DeviceClock::record(std::uint64_t seq, CUstream stream) noexcept {
  return ok_ && TIERRT_CU(cuEventRecord, slot(seq), stream) == CUDA_SUCCESS;
}

DeviceClock::Read DeviceClock::elapsed_ns(std::uint64_t a, std::uint64_t b, double* ns) const noexcept {
  if (!ok_ || b <= a || (b - a) / kEvery >= kSlots) return Read::Lost;
  const CUresult q = TIERRT_CU(cuEventQuery, slot(b));
  if (q == CUDA_ERROR_NOT_READY) return Read::NotYet;
  if (q != CUDA_SUCCESS) return Read::Lost;
  float ms = 0;
  if (TIERRT_CU(cuEventElapsedTime, &ms, slot(a), slot(b)) != CUDA_SUCCESS || !(ms >= 0)) return Read::Lost;
  *ns = static_cast<double>(ms) * 1e6;
  return Read::Ready;
}

}  // namespace tierrt
