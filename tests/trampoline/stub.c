// Stands in for preload/dlsym_hook.cpp behind the trampoline under test: the
// hidden functions the trampoline calls, with no driver and no runtime.
// Driver names are answered with a record of the call, so the test can tell
// they took the driver path with their arguments intact.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "trampoline_test.h"

#define HIDDEN __attribute__((visibility("hidden")))

static void *libc_dlsym;
static void *libc_dlvsym;
static int capturing;
static struct tt_record record;

// Called from libtt_libc.so's constructor.
void tt_stub_set_libc(void *dlsym_fn, void *dlvsym_fn) {
  libc_dlsym = dlsym_fn;
  libc_dlvsym = dlvsym_fn;
}

// While on, the trampoline's "libc" functions are recorders: the test can
// then see the arguments and the return address libc would have seen, and
// pass a null name (glibc's own dlsym faults on one).
const struct tt_record *tt_stub_capture(int on) {
  capturing = on;
  return &record;
}

// Single-threaded test: no locking.
static void load_libc_functions(void) {
  if (!libc_dlsym) dlopen("libtt_libc.so", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!libc_dlsym || !libc_dlvsym) {
    fprintf(stderr, "stub: no C library dlsym/dlvsym (libtt_libc.so: %s)\n", dlerror());
    abort();
  }
}

static void *remember(char via, void *handle, const char *name, const char *version, void *caller) {
  record.via = via;
  record.handle = handle;
  record.name = name;
  record.version = version;
  record.caller = caller;
  return &record;
}

static void *capture_dlsym(void *handle, const char *name) {
  remember('l', handle, name, NULL, __builtin_return_address(0));
  return NULL;
}

static void *capture_dlvsym(void *handle, const char *name, const char *version) {
  remember('l', handle, name, version, __builtin_return_address(0));
  return NULL;
}

// A real lookup overwrites the argument registers before the trampoline
// jumps; called through a volatile pointer so the compiler must load them.
static void *overwrite(void *a, void *b, void *c) { return (char *)a + (b == c); }
static void *(*volatile clobber_arguments)(void *, void *, void *) = overwrite;

HIDDEN void *tierrt_libc_dlsym(void) {
  clobber_arguments((void *)-1, (void *)-1, (void *)-1);
  if (capturing) return (void *)capture_dlsym;
  load_libc_functions();
  return libc_dlsym;
}

HIDDEN void *tierrt_libc_dlvsym(void) {
  clobber_arguments((void *)-1, (void *)-1, (void *)-1);
  if (capturing) return (void *)capture_dlvsym;
  load_libc_functions();
  return libc_dlvsym;
}

HIDDEN void *tierrt_dlsym_driver_symbol(void *handle, const char *name) {
  return remember('d', handle, name, NULL, __builtin_return_address(0));
}

HIDDEN void *tierrt_dlvsym_driver_symbol(void *handle, const char *name, const char *version) {
  return remember('v', handle, name, version, __builtin_return_address(0));
}
