#include "runtime/param_layouts.h"

#include "driver/driver.h"

namespace tierrt {

namespace {

// A thread's own scratch for layouts the shared table could not keep.
thread_local std::uint32_t tl_offsets[4096], tl_sizes[4096];

}  // namespace

bool ParamLayouts::query(CUfunction f, std::uint32_t* offsets, std::uint32_t* sizes, std::uint32_t cap,
                         std::uint32_t* count) noexcept {
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::uint32_t n = 0;
    for (;; ++n) {
      size_t off = 0, size = 0;
      CUresult r;
      // Library kernels (CUkernel) may be launched through cuLaunchKernel;
      // the driver describes them through cuKernelGetParamInfo.
      if (attempt == 0) r = TIERRT_CU(cuFuncGetParamInfo, f, n, &off, &size);
      else r = TIERRT_CU(cuKernelGetParamInfo, reinterpret_cast<CUkernel>(f), n, &off, &size);
      // Enumerate until the index is past the end (INVALID_VALUE); a kernel
      // may have none at all.
      if (r == CUDA_ERROR_INVALID_VALUE) break;
      if (r != CUDA_SUCCESS) {
        n = UINT32_MAX;
        break;
      }
      if (n >= cap) return false;
      offsets[n] = static_cast<std::uint32_t>(off);
      sizes[n] = static_cast<std::uint32_t>(size);
    }
    if (n != UINT32_MAX) {
      *count = n;
      return true;
    }
  }
  return false;
}

ParamLayout ParamLayouts::get(CUfunction f) noexcept {
  const std::uintptr_t key = reinterpret_cast<std::uintptr_t>(f);
  std::uint32_t h = static_cast<std::uint32_t>((key >> 4) * 0x9E3779B1u) & (kSlots - 1);
  for (std::uint32_t probe = 0; probe < 64; ++probe, h = (h + 1) & (kSlots - 1)) {
    Slot& s = slots_[h];
    std::uintptr_t k = s.key.load(std::memory_order_acquire);
    if (k == key) {
      if (s.ready.load(std::memory_order_acquire)) return s.layout;
      break;  // another thread is filling it in: answer from scratch
    }
    if (k != 0) continue;
    if (!s.key.compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
      if (k == key) break;
      continue;
    }
    // This thread owns the slot: fill it in.
    ParamLayout layout;
    std::uint32_t count = 0;
    if (query(f, tl_offsets, tl_sizes, 4096, &count)) {
      std::uint32_t at = used_.fetch_add(count, std::memory_order_relaxed);
      if (at + count <= kMaxParams) {
        for (std::uint32_t i = 0; i < count; ++i) offsets_[at + i] = tl_offsets[i], sizes_[at + i] = tl_sizes[i];
        layout = ParamLayout{count, offsets_ + at, sizes_ + at, true};
      } else {
        s.key.store(0, std::memory_order_release);  // no room: don't keep it
        return ParamLayout{count, tl_offsets, tl_sizes, true};
      }
    }
    s.layout = layout;
    s.ready.store(1, std::memory_order_release);
    return layout;
  }
  std::uint32_t count = 0;
  if (query(f, tl_offsets, tl_sizes, 4096, &count)) return ParamLayout{count, tl_offsets, tl_sizes, true};
  return ParamLayout{};
}

}  // namespace tierrt
