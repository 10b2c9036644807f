// Name and address bookkeeping for the hooks: which names we answer for, and
// where the real driver keeps each function.
#include <cstring>

#include "driver/driver.h"
#include "hooks.h"

namespace tierrt::preload {

namespace {

constexpr unsigned kCount = static_cast<unsigned>(Hook::kCount);

constexpr const char* kNames[kCount] = {
#define TIERRT_HOOK_NAME_(name, proto) #name,
    TIERRT_HOOKS(TIERRT_HOOK_NAME_)
#undef TIERRT_HOOK_NAME_
};

// Our definitions (hooks_*.cpp), declared with the prototype of their
// cuda.h counterpart; _ptsz/_ptds forms share the plain form's prototype.
extern "C" {
#define TIERRT_HOOK_DECL_(name, proto) extern decltype(::proto) name;
TIERRT_HOOKS(TIERRT_HOOK_DECL_)
#undef TIERRT_HOOK_DECL_
}

void* const kOurs[kCount] = {
#define TIERRT_HOOK_ADDR_(name, proto) reinterpret_cast<void*>(&name),
    TIERRT_HOOKS(TIERRT_HOOK_ADDR_)
#undef TIERRT_HOOK_ADDR_
};

std::atomic<void*> g_real[kCount];
std::atomic<bool> g_resolved{false};

void resolve_all() noexcept {
  for (unsigned i = 0; i < kCount; ++i) g_real[i].store(drv::resolve(kNames[i]), std::memory_order_relaxed);
  g_resolved.store(true, std::memory_order_release);
}

}  // namespace

void* real_address(Hook h) noexcept {
  if (!g_resolved.load(std::memory_order_acquire)) resolve_all();
  return g_real[static_cast<unsigned>(h)].load(std::memory_order_relaxed);
}

void* hook_for_name(const char* name) noexcept {
  for (unsigned i = 0; i < kCount; ++i)
    if (std::strcmp(kNames[i], name) == 0) return kOurs[i];
  return nullptr;
}

void* substitute_address(void* real) noexcept {
  if (!real) return real;
  if (!g_resolved.load(std::memory_order_acquire)) resolve_all();
  for (unsigned i = 0; i < kCount; ++i)
    if (g_real[i].load(std::memory_order_relaxed) == real) return kOurs[i];
  return real;
}

}  // namespace tierrt::preload
