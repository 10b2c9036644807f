// Kernel parameter layouts, read from the driver once per handle and kept in
// a fixed lock-free table, so a launch pays one hash probe.
//
// A launch may name a CUfunction or a CUkernel (a library kernel, which
// cuLaunchKernel accepts in place of a function); the driver describes the
// first through cuFuncGetParamInfo and the second through
// cuKernelGetParamInfo. The hooks that hand out handles (cuModuleGetFunction,
// cuKernelGetFunction, cuLibraryGetKernel) say which each one is; a handle
// nobody announced is tried as both. A layout the driver would not give is
// not kept (the next launch asks again), and every layout is forgotten when
// a module or library is unloaded, since a new function may then get an old
// handle. The table is the process's: modules load before the first
// allocation starts the engine.
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

enum class HandleKind : std::uint8_t { Unknown, Function, Kernel };

class ParamLayouts {
 public:
  static ParamLayouts& process() noexcept;

  // The layout of f; the first call per handle (and per unload) asks the
  // driver, with no lock held. Never allocates.
  ParamLayout get(CUfunction f) noexcept;
  // A hook handed out `handle` as a function or a kernel.
  void note_handle(const void* handle, HandleKind kind) noexcept;
  // A module or library was unloaded: every layout is asked for again.
  void forget_all() noexcept { epoch_.fetch_add(1, std::memory_order_acq_rel); }

  // Whether this driver can describe parameters at all: cuFuncGetParamInfo
  // exists (CUDA 12.4 and later).
  static bool driver_describes_parameters() noexcept;

 private:
  static constexpr std::uint32_t kSlots = 1u << 14;
  static constexpr std::uint32_t kMaxParams = 1u << 18;
  static constexpr std::uint32_t kMaxCount = 4096;
  // layout: (epoch + 1) << 32 | first << 13 | count; 0 while not asked.
  struct Slot {
    std::atomic<std::uintptr_t> key{0};
    std::atomic<HandleKind> kind{HandleKind::Unknown};
    std::atomic<std::uint64_t> layout{0};
  };
  Slot* slot_of(std::uintptr_t key) noexcept;  // null: the table is full
  static bool query(CUfunction f, HandleKind kind, std::uint32_t* offsets, std::uint32_t* sizes,
                    std::uint32_t* count) noexcept;

  Slot slots_[kSlots];
  std::uint32_t offsets_[kMaxParams];
  std::uint32_t sizes_[kMaxParams];
  std::atomic<std::uint32_t> used_{0};
  std::atomic<std::uint32_t> epoch_{0};
};

}  // namespace tierrt
