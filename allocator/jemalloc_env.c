/*
 * What jemalloc sees of its surroundings. jemalloc reads its options from
 * the MALLOC_CONF environment variable and the /etc/malloc.conf symlink;
 * both belong to the application (set for its own allocator, or for a
 * jemalloc it preloads), and an option meant for that allocator, such as
 * abort_conf:true with an option this jemalloc does not know, would abort
 * the job from inside tierrt. make_private_jemalloc.sh points jemalloc's
 * calls of secure_getenv and readlink here: those two sources read as
 * absent, everything else passes through, and the options tierrt wants are
 * the compiled-in ones (jemalloc_shim.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((visibility("hidden"))) char* tierrt_je_env_getenv(const char* name) {
  size_t n = strlen(name);
  static const char kConf[] = "MALLOC_CONF"; /* also a prefixed build's JE_MALLOC_CONF */
  if (n >= sizeof(kConf) - 1 && strcmp(name + n - (sizeof(kConf) - 1), kConf) == 0) return NULL;
  return secure_getenv(name);
}

__attribute__((visibility("hidden"))) ssize_t tierrt_je_env_readlink(const char* path, char* buf, size_t size) {
  if (strcmp(path, "/etc/malloc.conf") == 0 || strcmp(path, "/etc/je_malloc.conf") == 0) {
    errno = ENOENT;
    return -1;
  }
  return readlink(path, buf, size);
}
