// Hands the C library's dlsym and dlvsym to the stub, which cannot name them
// itself: in a process where the trampoline library comes first, every
// reference to "dlsym" binds to the trampoline. The stub opens this library
// with RTLD_DEEPBIND, so the references below bind to the C library first.
#define _GNU_SOURCE
#include <dlfcn.h>

// In the stub library; weak so this library links on its own.
void tt_stub_set_libc(void *dlsym_fn, void *dlvsym_fn) __attribute__((weak));

__attribute__((constructor)) static void hand_over(void) {
  if (tt_stub_set_libc) tt_stub_set_libc((void *)&dlsym, (void *)&dlvsym);
}
