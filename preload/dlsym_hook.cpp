// The C side of the dlsym / dlvsym interposition (the exported entry points
// are in dlsym_trampoline_<arch>.S, or below on other architectures).
//
// Programs that dlopen libcuda.so.1 and dlsym its functions (XLA's stubs and
// many loaders) never see LD_PRELOAD definitions, because a lookup on a
// handle searches that library only. So dlsym itself answers: when the name
// is a function tierrt wraps and the symbol found lives in the CUDA driver
// (or, for NCCL's host API, in libnccl), the caller gets tierrt's function
// instead.
#include <dlfcn.h>

#include <cstring>

#include "driver/driver.h"
#include "hooks.h"

// A sanitizer runtime preloaded ahead of libtierrt.so looks functions up with
// dlsym while it starts, before its shadow memory exists, and the trampoline
// sends those lookups here: this path must be uninstrumented (as is the
// real-dlsym lookup in driver/driver.cpp it calls). answer() and what it
// calls are instrumented: only "cu..." and "nccl..." names reach them, which
// no runtime looks up.
#define TIERRT_UNSANITIZED __attribute__((no_sanitize("address", "undefined", "thread")))

namespace {

using DlvsymFn = void* (*)(void*, const char*, const char*);

TIERRT_UNSANITIZED DlvsymFn libc_dlvsym() noexcept {
  static DlvsymFn fn = reinterpret_cast<DlvsymFn>(tierrt::drv::real_dlsym()(RTLD_NEXT, "dlvsym"));
  return fn;
}

// True when `addr` is inside a library whose file name starts with `library`.
bool in_library(void* addr, const char* library) noexcept {
  Dl_info info;
  if (!dladdr(addr, &info) || !info.dli_fname) return false;
  const char* base = std::strrchr(info.dli_fname, '/');
  base = base ? base + 1 : info.dli_fname;
  return std::strncmp(base, library, std::strlen(library)) == 0;
}

// RTLD_NEXT is relative to the code that called dlsym, which the C library
// finds from its return address; from here that would be libtierrt.so, and
// an interposer loaded after tierrt asking for the function after its own
// would be handed its own back (and call itself forever). So it is resolved
// here for the caller (versions aside: the driver's functions have none).
void* lookup(void* handle, const char* name, const void* caller, const char* version) noexcept {
  if (handle == RTLD_NEXT) {
    bool found_caller = false;
    void* next = tierrt::drv::next_definition(caller, name, &found_caller);
    if (found_caller) return next;
  }
  if (version == nullptr) return tierrt::drv::real_dlsym()(handle, name);
  DlvsymFn fn = libc_dlvsym();
  return fn ? fn(handle, name, version) : nullptr;
}

bool is_nccl_name(const char* name) noexcept { return std::strncmp(name, "nccl", 4) == 0; }

void* answer(const char* name, void* found) noexcept {
  if (!found || !name) return found;
  if (is_nccl_name(name)) return in_library(found, "libnccl.so") ? tierrt::preload::nccl_hook_for(name, found) : found;
  void* ours = tierrt::preload::hook_for_name(name);
  return ours && ours != found && in_library(found, "libcuda.so") ? ours : found;
}

}  // namespace

extern "C" {

__attribute__((visibility("hidden"))) TIERRT_UNSANITIZED
void* tierrt_libc_dlsym() {
  return reinterpret_cast<void*>(tierrt::drv::real_dlsym());
}

__attribute__((visibility("hidden"))) TIERRT_UNSANITIZED
void* tierrt_libc_dlvsym() { return reinterpret_cast<void*>(libc_dlvsym()); }

// Jumped to from the trampoline: the return address is the caller's.
__attribute__((visibility("hidden"))) TIERRT_UNSANITIZED
void* tierrt_dlsym_driver_symbol(void* handle, const char* name) {
  return answer(name, lookup(handle, name, __builtin_return_address(0), nullptr));
}

__attribute__((visibility("hidden"))) TIERRT_UNSANITIZED
void* tierrt_dlvsym_driver_symbol(void* handle, const char* name, const char* version) {
  return answer(name, lookup(handle, name, __builtin_return_address(0), version));
}

#if !defined(__x86_64__) && !defined(__aarch64__)
// Architectures without a trampoline (the dlsym_trampoline_<arch>.S files
// that preload/meson.build selects). Here dlsym(RTLD_NEXT, ...) from another
// library may be resolved relative to libtierrt.so rather than to its
// caller, unless the compiler happens to turn these calls into tail calls.
TIERRT_UNSANITIZED void* dlsym(void* handle, const char* name) {
  if (name && (name[0] == 'c' ? name[1] == 'u' : name[0] == 'n' && name[1] == 'c' && name[2] == 'c' && name[3] == 'l'))
    return answer(name, lookup(handle, name, __builtin_return_address(0), nullptr));
  return tierrt::drv::real_dlsym()(handle, name);
}

TIERRT_UNSANITIZED void* dlvsym(void* handle, const char* name, const char* version) {
  if (name && (name[0] == 'c' ? name[1] == 'u' : name[0] == 'n' && name[1] == 'c' && name[2] == 'c' && name[3] == 'l'))
    return answer(name, lookup(handle, name, __builtin_return_address(0), version));
  DlvsymFn fn = libc_dlvsym();
  return fn ? fn(handle, name, version) : nullptr;
}
#endif

}  // extern "C"
