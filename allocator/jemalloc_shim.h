/* The private jemalloc, as tierrt sees it (C linkage, no jemalloc types). */
#ifndef TIERRT_ALLOCATOR_JEMALLOC_SHIM_H
#define TIERRT_ALLOCATOR_JEMALLOC_SHIM_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where the arena's extents come from: ranges of pinned chunks. */
typedef struct tierrt_je_ops {
  void* ctx;
  void* (*alloc)(void* ctx, size_t size, size_t alignment);
  void (*dalloc)(void* ctx, void* addr, size_t size);
  bool (*same_chunk)(void* ctx, void* a, void* b);
} tierrt_je_ops;

/* An arena whose extents come from `ops` (which stays referenced until the
 * arena is destroyed); one per pool. Returns 0 on success. */
int tierrt_je_arena_create(const tierrt_je_ops* ops, unsigned* arena);
int tierrt_je_arena_destroy(unsigned arena);
void* tierrt_je_alloc(unsigned arena, size_t size);
void tierrt_je_free(void* p);
size_t tierrt_je_usable(void* p);
size_t tierrt_je_round(size_t size);
const char* tierrt_je_version(void);

#ifdef __cplusplus
}
#endif

#endif
