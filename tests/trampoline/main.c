// Runs with the trampoline library (trampoline + stub.c) preloaded, in front
// of the three layers it links (layer.c). Checks that lookups which are not
// driver names reach the C library as if the trampoline were not there
// (above all, RTLD_NEXT relative to the caller) and that driver names take
// the driver path with their arguments.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trampoline_test.h"

int tt_chain(int depth);
int tt_layer1(void);
int tt_layer2(void);
int tt_layer3(void);

typedef int (*ChainFn)(int);
typedef const struct tt_record *(*CaptureFn)(int);
typedef size_t (*StrlenFn)(const char *);

static int failures;

static void check(int ok, const char *what) {
  printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

// True when `addr` lies in this program, not in the trampoline's library.
static int in_program(void *addr) {
  Dl_info here, there;
  return dladdr((void *)&check, &here) && dladdr(addr, &there) && here.dli_fbase == there.dli_fbase;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);  // a crash still shows the checks before it
  check(tt_layer1() + tt_layer2() + tt_layer3() == 6, "the three layers are linked");

  // Each layer finds the next one (and layer 3 none) with dlsym and dlvsym.
  int chain = tt_chain(0);
  printf("      chain from layer 1: %d (want 321)\n", chain);
  check(chain == 321, "RTLD_NEXT from layer 1 finds layer 2, from layer 2 layer 3");
  void *h2 = dlopen("libtt_layer2.so", RTLD_NOW | RTLD_NOLOAD);
  ChainFn second = h2 ? (ChainFn)dlsym(h2, "tt_chain") : NULL;
  chain = second ? second(0) : 0;
  printf("      chain from layer 2: %d (want 32)\n", chain);
  check(chain == 32, "RTLD_NEXT from layer 2 finds layer 3, not layer 1");

  check(dlsym(RTLD_DEFAULT, "calloc") == (void *)&calloc, "dlsym(RTLD_DEFAULT, \"calloc\"): 'c' alone is no driver name");
  StrlenFn len = (StrlenFn)dlsym(RTLD_DEFAULT, "strlen");
  check(len && len("four") == 4, "dlsym(RTLD_DEFAULT, \"strlen\")");
  check(dlsym(RTLD_DEFAULT, "tt_no_such_symbol") == NULL && dlerror() != NULL, "a missing symbol: null, dlerror set");

  const char *name = "cuMemAlloc_v2";
  const struct tt_record *r = dlsym(h2, name);
  check(r && r->via == 'd' && r->handle == h2 && r->name == name && in_program(r->caller),
        "dlsym of a cu name: the driver path, same arguments and caller");
  const char *version = "libcuda";
  r = dlvsym(RTLD_DEFAULT, "cuInit", version);
  check(r && r->via == 'v' && r->handle == RTLD_DEFAULT && r->version == version && !strcmp(r->name, "cuInit") &&
            in_program(r->caller),
        "dlvsym of a cu name: the driver path, same arguments and caller");

  // Where the C library's functions would run: what they would see.
  CaptureFn capture = (CaptureFn)dlsym(RTLD_DEFAULT, "tt_stub_capture");
  if (!capture) {
    check(0, "the stub library is preloaded");
    return 1;
  }
  // glibc declares the name non-null; a volatile keeps the compiler from
  // acting on that.
  const char *volatile no_name = NULL;
  r = capture(1);
  void *got = dlsym(h2, "tt_chain");
  int ok = got == NULL && r->via == 'l' && r->handle == h2 && !strcmp(r->name, "tt_chain");
  int from_program = in_program(r->caller);
  got = dlsym(RTLD_NEXT, no_name);
  int null_ok = got == NULL && r->via == 'l' && r->handle == RTLD_NEXT && r->name == NULL;
  got = dlvsym(RTLD_DEFAULT, no_name, version);
  int vnull_ok = got == NULL && r->via == 'l' && r->name == NULL && r->version == version && in_program(r->caller);
  got = dlvsym(h2, "c", "TT_1");
  int vok = r->via == 'l' && r->handle == h2 && !strcmp(r->name, "c") && !strcmp(r->version, "TT_1") &&
            in_program(r->caller);
  capture(0);
  check(ok, "dlsym of another name: libc's place gets the same arguments");
  check(from_program, "dlsym of another name: libc's place sees the program as its caller");
  check(null_ok, "dlsym with a null name: no fault, passed on as it is");
  check(vnull_ok, "dlvsym with a null name: no fault, passed on as it is");
  check(vok, "dlvsym of another name: libc's place gets the same arguments and caller");

  printf("%s\n", failures ? "FAILED" : "all passed");
  return failures ? 1 : 0;
}
