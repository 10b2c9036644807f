// One of three libraries (LAYER 1, 2, 3, linked in that order) that each
// define tt_chain and pass the call on to the next definition with
// dlsym(RTLD_NEXT, ...) and dlvsym(RTLD_NEXT, ...), as an interposer does.
// RTLD_NEXT must mean "next after this library": resolved relative to the
// trampoline library in front of them all, layer 1 would find itself.
#define _GNU_SOURCE
#include <dlfcn.h>

#ifndef LAYER
#error "build with -DLAYER=1, 2 or 3"
#endif

#define GLUE2(a, b) a##b
#define GLUE(a, b) GLUE2(a, b)

typedef int (*ChainFn)(int);

int tt_chain(int depth);
// This library's own tt_chain; the plain name may bind to another layer's.
int tt_chain_here(int depth) __attribute__((alias("tt_chain"), visibility("hidden")));

// Returns the layers the call went through, first in the lowest digit
// (layer 1 in front of 2 in front of 3: 321), or a negative number.
int tt_chain(int depth) {
  if (depth > 3) return -2;  // a lookup that went round in circles
  ChainFn next = (ChainFn)dlsym(RTLD_NEXT, "tt_chain");
  ChainFn vnext = (ChainFn)dlvsym(RTLD_NEXT, "tt_chain", "TT_1");
  if (next != vnext) return -3;
  if (next == tt_chain_here) return -1;
  return LAYER + 10 * (next ? next(depth + 1) : 0);
}

// Gives the program a reason to link each layer.
int GLUE(tt_layer, LAYER)(void) { return LAYER; }
