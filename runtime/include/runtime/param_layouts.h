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

// One word a launch scans: an 8-byte word aligned in the driver's parameter
// buffer (where a kernel reads a pointer), as the parameter whose copy holds
// it and where in that copy it starts. A layout is kept as the list of its
// words, worked out once, so that a launch walks one flat list rather than
// working each parameter's words out again.
struct ParamWord {
  std::uint16_t param = 0;
  std::uint16_t offset = 0;  // bytes into the parameter's copy
};

// Appends to out[*n..cap) the words of parameter `index`, at byte `offset`
// of the buffer and `size` bytes long; false where they do not fit (or the
// parameter is past what a word can say: index or size past 65535).
bool append_param_words(std::uint32_t index, std::uint64_t offset, std::uint64_t size, ParamWord* out,
                        std::uint32_t cap, std::uint32_t* n) noexcept;

struct ParamLayout {
  std::uint32_t count = 0;           // words
  const ParamWord* words = nullptr;  // count entries, in the buffer's order
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
  static constexpr std::uint32_t kMaxWords = 1u << 18;  // of every layout kept
  static constexpr std::uint32_t kMaxCount = 4096;       // parameters of one function
  // Words of one function: its buffer is at most 32 KiB (4096 words); a
  // layout the driver would give with more is taken as unknown.
  static constexpr std::uint32_t kMaxLayoutWords = 4096;
  // layout: (epoch + 1) << 32 | first << 13 | count; 0 while not asked.
  struct Slot {
    std::atomic<std::uintptr_t> key{0};
    std::atomic<HandleKind> kind{HandleKind::Unknown};
    std::atomic<std::uint64_t> layout{0};
  };
  Slot* slot_of(std::uintptr_t key) noexcept;  // null: the table is full
  static bool query(CUfunction f, HandleKind kind, ParamWord* words, std::uint32_t* count) noexcept;

  Slot slots_[kSlots];
  ParamWord words_[kMaxWords];
  std::atomic<std::uint32_t> used_{0};
  std::atomic<std::uint32_t> epoch_{0};
};

}  // namespace tierrt
