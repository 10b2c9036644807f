/*
 * The only code that sees jemalloc. It is linked together with
 * libjemalloc_pic.a into one relocatable object whose symbols are all made
 * local except the tierrt_je_* functions below, so the application's malloc
 * stays the C library's and jemalloc stays private to tierrt.
 */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <jemalloc/jemalloc.h>

#include "jemalloc_shim.h"

static const tierrt_je_ops* g_ops;

/* The only options source jemalloc reads (jemalloc_env.c hides the
 * application's): tierrt allocates from its own arena without a thread
 * cache, and starts no thread of jemalloc's inside the job. */
const char* malloc_conf = "narenas:1,tcache:false,background_thread:false";

static void* hook_alloc(extent_hooks_t* h, void* new_addr, size_t size,
                        size_t alignment, bool* zero, bool* commit, unsigned ind) {
  (void)h; (void)ind;
  if (new_addr != NULL) return NULL;
  void* p = g_ops->alloc(g_ops->ctx, size, alignment);
  if (p == NULL) return NULL;
  if (*zero) memset(p, 0, size);
  *commit = true;
  return p;
}

static bool hook_dalloc(extent_hooks_t* h, void* addr, size_t size, bool committed,
                        unsigned ind) {
  (void)h; (void)committed; (void)ind;
  g_ops->dalloc(g_ops->ctx, addr, size);
  return false;
}

static void hook_destroy(extent_hooks_t* h, void* addr, size_t size, bool committed,
                         unsigned ind) {
  (void)h; (void)committed; (void)ind;
  g_ops->dalloc(g_ops->ctx, addr, size);
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
  (void)h; (void)sa; (void)sb; (void)committed; (void)ind;
  /* Never merge across two pinned chunks: one copy must stay in one chunk. */
  return g_ops->same_chunk(g_ops->ctx, a, b) ? false : true;
}

static extent_hooks_t g_hooks = {
    hook_alloc, hook_dalloc, hook_destroy, hook_commit, hook_decommit,
    NULL, NULL, hook_split, hook_merge,
};

int tierrt_je_arena_create(const tierrt_je_ops* ops, unsigned* arena) {
  g_ops = ops;
  extent_hooks_t* hooks = &g_hooks;
  size_t sz = sizeof(*arena);
  return mallctl("arenas.create", arena, &sz, &hooks, sizeof(hooks));
}

int tierrt_je_arena_destroy(unsigned arena) {
  char name[64];
  int n = 0;
  const char* pre = "arena.";
  const char* post = ".destroy";
  char digits[16];
  int d = 0;
  unsigned v = arena;
  do { digits[d++] = (char)('0' + v % 10); v /= 10; } while (v != 0);
  for (const char* p = pre; *p; ++p) name[n++] = *p;
  while (d > 0) name[n++] = digits[--d];
  for (const char* p = post; *p; ++p) name[n++] = *p;
  name[n] = '\0';
  return mallctl(name, NULL, NULL, NULL, 0);
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
