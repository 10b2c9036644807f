#include "runtime/param_layouts.h"

#include <iterator>

#include "driver/driver.h"

namespace tierrt {

namespace {

// A thread's own scratch for layouts the shared table could not keep.
thread_local ParamWord tl_words[4096];

// The words of f's parameters as a function (cuFuncGetParamInfo) or as a
// kernel (cuKernelGetParamInfo), until the index is past the end
// (INVALID_VALUE): *count words, of *params parameters; false when the
// driver refuses the handle, or the parameters or their words exceed what a
// layout holds.
// The end is asked for twice: a layout cut short by one failed call would
// hide the blocks of every later parameter from every launch of f (the
// layout is kept), and a kernel would then run on spilled memory.
bool enumerate(CUfunction f, bool as_kernel, ParamWord* words, std::uint32_t max_params, std::uint32_t max_words,
               std::uint32_t* count, std::uint32_t* params) noexcept {
  std::uint32_t n_words = 0;
  for (std::uint32_t n = 0;; ++n) {
    size_t off = 0, size = 0;
    auto ask = [&] {
      return as_kernel ? TIERRT_CU(cuKernelGetParamInfo, reinterpret_cast<CUkernel>(f), n, &off, &size)
                       : TIERRT_CU(cuFuncGetParamInfo, f, n, &off, &size);
    };
    CUresult r = ask();
    if (r == CUDA_ERROR_INVALID_VALUE) r = ask();
    if (r == CUDA_ERROR_INVALID_VALUE) {
      *count = n_words;
      *params = n;
      return true;
    }
    if (r != CUDA_SUCCESS || n >= max_params || !append_param_words(n, off, size, words, max_words, &n_words))
      return false;
  }
}

}  // namespace

bool append_param_words(std::uint32_t index, std::uint64_t offset, std::uint64_t size, ParamWord* out,
                        std::uint32_t cap, std::uint32_t* n) noexcept {
  if (index > UINT16_MAX || size > UINT16_MAX || offset > UINT32_MAX) return false;
  const std::uint64_t end = offset + size;
  for (std::uint64_t w = (offset + 7) & ~std::uint64_t{7}; w + 8 <= end; w += 8) {
    if (*n >= cap) return false;
    out[(*n)++] = ParamWord{static_cast<std::uint16_t>(index), static_cast<std::uint16_t>(w - offset)};
  }
  return true;
}

ParamLayouts& ParamLayouts::process() noexcept {
  static ParamLayouts layouts;
  return layouts;
}

bool ParamLayouts::driver_describes_parameters() noexcept {
  int version = 0;
  return TIERRT_CU(cuDriverGetVersion, &version) == CUDA_SUCCESS && version >= 12040 &&
         drv::resolve("cuFuncGetParamInfo") != nullptr;
}

bool ParamLayouts::query(CUfunction f, HandleKind kind, ParamWord* words, std::uint32_t* count) noexcept {
  static_assert(std::size(tl_words) >= kMaxLayoutWords, "a thread's scratch holds any layout kept");
  std::uint32_t params = 0;
  auto ask = [&](bool as_kernel, std::uint32_t* n, std::uint32_t* p) {
    return enumerate(f, as_kernel, words, kMaxCount, kMaxLayoutWords, n, p);
  };
  if (kind != HandleKind::Unknown) return ask(kind == HandleKind::Kernel, count, &params);
  // Nobody said what the handle is. A driver may answer "past the end" for
  // a handle of the other kind, so an empty answer (no parameters) is not
  // taken as final.
  const bool as_function = ask(false, count, &params);
  if (as_function && params > 0) return true;
  // A function without parameters has no words: the kernel's answer may
  // take the scratch.
  std::uint32_t n = 0, kernel_params = 0;
  if (ask(true, &n, &kernel_params) && (kernel_params > 0 || !as_function)) {
    *count = n;
    return true;
  }
  return as_function;
}

ParamLayouts::Slot* ParamLayouts::slot_of(std::uintptr_t key) noexcept {
  std::uint32_t h = static_cast<std::uint32_t>((key >> 4) * 0x9E3779B1u) & (kSlots - 1);
  for (std::uint32_t probe = 0; probe < 64; ++probe, h = (h + 1) & (kSlots - 1)) {
    Slot& s = slots_[h];
    std::uintptr_t k = s.key.load(std::memory_order_acquire);
    if (k == 0 && !s.key.compare_exchange_strong(k, key, std::memory_order_acq_rel) && k != key) continue;
    if (k == 0 || k == key) return &s;
  }
  return nullptr;
}

void ParamLayouts::note_handle(const void* handle, HandleKind kind) noexcept {
  if (handle == nullptr) return;
  Slot* s = slot_of(reinterpret_cast<std::uintptr_t>(handle));
  if (s == nullptr || s->kind.load(std::memory_order_relaxed) == kind) return;
  s->kind.store(kind, std::memory_order_relaxed);
  s->layout.store(0, std::memory_order_release);  // asked of the driver as this kind next time
}

ParamLayout ParamLayouts::get(CUfunction f) noexcept {
  Slot* s = slot_of(reinterpret_cast<std::uintptr_t>(f));
  // The epoch before asking: a layout read across an unload is stale at once.
  const std::uint64_t epoch = epoch_.load(std::memory_order_acquire) + 1ull;
  HandleKind kind = HandleKind::Unknown;
  if (s != nullptr) {
    const std::uint64_t v = s->layout.load(std::memory_order_acquire);
    if ((v >> 32) == epoch) {
      const std::uint32_t first = static_cast<std::uint32_t>(v >> 13) & ((1u << 19) - 1);
      return ParamLayout{static_cast<std::uint32_t>(v) & ((1u << 13) - 1), words_ + first, true};
    }
    kind = s->kind.load(std::memory_order_relaxed);
  }
  std::uint32_t count = 0;
  if (!query(f, kind, tl_words, &count)) return ParamLayout{};
  if (s != nullptr) {
    const std::uint32_t first = used_.fetch_add(count, std::memory_order_relaxed);
    if (first + count <= kMaxWords) {
      for (std::uint32_t i = 0; i < count; ++i) words_[first + i] = tl_words[i];
      s->layout.store(epoch << 32 | std::uint64_t{first} << 13 | count, std::memory_order_release);
      return ParamLayout{count, words_ + first, true};
    }
  }
  return ParamLayout{count, tl_words, true};
}

}  // namespace tierrt
