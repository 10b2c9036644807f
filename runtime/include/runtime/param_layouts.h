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

// What a launch scans of each parameter: the 8-byte words aligned in the
// driver's parameter buffer (where a kernel reads a pointer), as positions
// in the parameter's own copy. Worked out once per layout, so that a launch
// reads one entry per parameter rather than working each out again.
struct ParamWords {
  std::uint32_t span = 0;  // skip | count << 3
  // Bytes into the parameter's copy where its first aligned word starts (0..7).
  std::uint32_t skip() const noexcept { return span & 7; }
  std::uint32_t count() const noexcept { return span >> 3; }
  // A parameter at byte `offset` of the buffer, `size` bytes long.
  static ParamWords of(std::uint32_t offset, std::uint32_t size) noexcept {
    const std::uint64_t first = (std::uint64_t{offset} + 7) & ~std::uint64_t{7}, end = std::uint64_t{offset} + size;
    const std::uint64_t words = end >= first + 8 ? (end - first) / 8 : 0;
    return ParamWords{static_cast<std::uint32_t>(first - offset) | static_cast<std::uint32_t>(words << 3)};
  }
};

struct ParamLayout {
  std::uint32_t count = 0;
  const ParamWords* words = nullptr;  // count entries, one per parameter
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
  static bool query(CUfunction f, HandleKind kind, ParamWords* words, std::uint32_t* count) noexcept;

  Slot slots_[kSlots];
  ParamWords words_[kMaxParams];
  std::atomic<std::uint32_t> used_{0};
  std::atomic<std::uint32_t> epoch_{0};
};

}  // namespace tierrt
