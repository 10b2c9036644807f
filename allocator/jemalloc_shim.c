/*
 * The only code that sees jemalloc. It is linked together with
 * libjemalloc_pic.a into one relocatable object whose symbols are all made
 * local except the tierrt_je_* functions below, so the application's malloc
 * stays the C library's and jemalloc stays private to tierrt.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <jemalloc/jemalloc.h>

#include "jemalloc_shim.h"

/* One per arena: jemalloc hands each hook the hooks it was created with,
 * and so each arena reaches its own pool (two allocators in copy mode, as
 * with two devices, never carve from each other's chunks). */
typedef struct arena_hooks {
  extent_hooks_t hooks; /* first: a hook's `h` is the arena_hooks */
  const tierrt_je_ops* ops;
} arena_hooks;

static const tierrt_je_ops* ops_of(extent_hooks_t* h) { return ((arena_hooks*)h)->ops; }

/* The only options source jemalloc reads (jemalloc_env.c hides the
 * application's): tierrt allocates from its own arena without a thread
 * cache, and starts no thread of jemalloc's inside the job. */
const char* malloc_conf = "narenas:1,tcache:false,background_thread:false";

static void* hook_alloc(extent_hooks_t* h, void* new_addr, size_t size,
                        size_t alignment, bool* zero, bool* commit, unsigned ind) {
  (void)ind;
  if (new_addr != NULL) return NULL;
  const tierrt_je_ops* ops = ops_of(h);
  void* p = ops->alloc(ops->ctx, size, alignment);
  if (p == NULL) return NULL;
  if (*zero) memset(p, 0, size);
  *commit = true;
  return p;
}

static bool hook_dalloc(extent_hooks_t* h, void* addr, size_t size, bool committed,
                        unsigned ind) {
  (void)committed; (void)ind;
  ops_of(h)->dalloc(ops_of(h)->ctx, addr, size);
  return false;
}

static void hook_destroy(extent_hooks_t* h, void* addr, size_t size, bool committed,
                         unsigned ind) {
  (void)committed; (void)ind;
  ops_of(h)->dalloc(ops_of(h)->ctx, addr, size);
}

static bool hook_commit(extent_hooks_t* h, void* addr, size_t size, size_t off,
                        size_t len, unsigned ind) {
  (void)h; (void)addr; (void)size; (void)off; (void)len; (void)ind;
  return false; /* pinned memory is always committed */
}

static bool hook_decommit(extent_hooks_t* h, void* addr, size_t size, size_t off,
                          size_t len, unsigned ind) {
  (void)h; (void)addr; (void)size; (void)off; (void)len; (void)ind;
  return true; /* refuse: keep it committed */
}

static bool hook_split(extent_hooks_t* h, void* addr, size_t size, size_t a,
                       size_t b, bool committed, unsigned ind) {
  (void)h; (void)addr; (void)size; (void)a; (void)b; (void)committed; (void)ind;
  return false;
}

static bool hook_merge(extent_hooks_t* h, void* a, size_t sa, void* b, size_t sb,
                       bool committed, unsigned ind) {
  (void)sa; (void)sb; (void)committed; (void)ind;
  /* Never merge across two pinned chunks: one copy must stay in one chunk. */
  return ops_of(h)->same_chunk(ops_of(h)->ctx, a, b) ? false : true;
}

static const extent_hooks_t k_hooks = {
    hook_alloc, hook_dalloc, hook_destroy, hook_commit, hook_decommit,
    NULL, NULL, hook_split, hook_merge,
};

int tierrt_je_arena_create(const tierrt_je_ops* ops, unsigned* arena) {
  /* jemalloc keeps the pointer for the arena's life (tierrt_je_arena_destroy
   * frees it); this malloc is the private jemalloc's own arena 0. */
  arena_hooks* a = malloc(sizeof(*a));
  if (a == NULL) return -1;
  a->hooks = k_hooks;
  a->ops = ops;
  extent_hooks_t* hooks = &a->hooks;
  size_t sz = sizeof(*arena);
  const int r = mallctl("arenas.create", arena, &sz, &hooks, sizeof(hooks));
  if (r != 0) free(a);
  return r;
}

static void arena_ctl_name(char* name, unsigned arena, const char* post) {
  int n = 0;
  const char* pre = "arena.";
  char digits[16];
  int d = 0;
  unsigned v = arena;
  do { digits[d++] = (char)('0' + v % 10); v /= 10; } while (v != 0);
  for (const char* p = pre; *p; ++p) name[n++] = *p;
  while (d > 0) name[n++] = digits[--d];
  for (const char* p = post; *p; ++p) name[n++] = *p;
  name[n] = '\0';
}

int tierrt_je_arena_destroy(unsigned arena) {
  char name[64];
  arena_ctl_name(name, arena, ".extent_hooks");
  extent_hooks_t* hooks = NULL;
  size_t sz = sizeof(hooks);
  if (mallctl(name, &hooks, &sz, NULL, 0) != 0) hooks = NULL;
  arena_ctl_name(name, arena, ".destroy");
  const int r = mallctl(name, NULL, NULL, NULL, 0);
  /* Destroyed, the arena calls its hooks no more. */
  if (r == 0 && hooks != NULL) free((arena_hooks*)hooks);
  return r;
}

void* tierrt_je_alloc(unsigned arena, size_t size) {
  return mallocx(size, MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE);
}

void tierrt_je_free(void* p) { dallocx(p, MALLOCX_TCACHE_NONE); }

size_t tierrt_je_usable(void* p) { return sallocx(p, 0); }

size_t tierrt_je_round(size_t size) { return nallocx(size, 0); }

const char* tierrt_je_version(void) {
  const char* v = NULL;
  size_t sz = sizeof(v);
  if (mallctl("version", &v, &sz, NULL, 0) != 0) return NULL;
  return v;
}
