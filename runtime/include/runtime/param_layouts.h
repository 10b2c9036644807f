// Kernel parameter layouts, read once per function from the driver
// (cuFuncGetParamInfo, or cuKernelGetParamInfo for library kernels) and
// kept in a fixed lock-free table, so a launch pays one hash probe.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

namespace tierrt {

struct ParamLayout {
  std::uint32_t count = 0;
  const std::uint32_t* offsets = nullptr;
  const std::uint32_t* sizes = nullptr;
  bool known = false;  // false: the driver would not say; the launch can't be scanned
};

class ParamLayouts {
 public:
  // The layout of f; the first call per function asks the driver (no lock is
  // held meanwhile). Never allocates.
  ParamLayout get(CUfunction f) noexcept;

 private:
  static constexpr std::uint32_t kSlots = 1u << 14;
  static constexpr std::uint32_t kMaxParams = 1u << 18;
  struct Slot {
    std::atomic<std::uintptr_t> key{0};
    std::atomic<int> ready{0};
    ParamLayout layout;
  };
  bool query(CUfunction f, std::uint32_t* offsets, std::uint32_t* sizes, std::uint32_t cap,
             std::uint32_t* count) noexcept;

  Slot slots_[kSlots];
  std::uint32_t offsets_[kMaxParams];
  std::uint32_t sizes_[kMaxParams];
  std::atomic<std::uint32_t> used_{0};
};

}  // namespace tierrt
