// jemalloc stays private: in a process that loads a library linking the
// allocator, malloc is still the C library's, and no jemalloc symbol is
// visible, while the allocator's pinned arena works.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/allocator/sim_support.h"

namespace {

std::string object_of(void* sym) {
  Dl_info info{};
  if (sym == nullptr || dladdr(sym, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// The C library's malloc, or the sanitizer runtime's that replaces it in a
// sanitized build: never the allocator's jemalloc.
bool from_c_library(void* sym) {
  const std::string object = object_of(sym);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  if (object.find("libasan.so") != std::string::npos || object.find("libtsan.so") != std::string::npos) return true;
#endif
  return object.find("libc.so") != std::string::npos;
}

TEST(JemallocPrivate, MallocStaysLibcsAndNothingLeaks) {
  const char* probe = std::getenv("TIERRT_PROBE_LIB");
  ASSERT_NE(probe, nullptr);
  // Preloaded by the test's environment, as LD_PRELOAD=libtierrt.so is.
  void* h = dlopen(probe, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr) << dlerror();
  for (const char* fn : {"malloc", "free", "calloc", "realloc", "posix_memalign", "aligned_alloc"}) {
    EXPECT_TRUE(from_c_library(dlsym(RTLD_DEFAULT, fn))) << fn;
    EXPECT_TRUE(from_c_library(dlsym(h, fn))) << fn;
  }
  for (const char* fn : {"mallocx", "dallocx", "mallctl", "je_malloc_default", "je_arena_init",
                         "tierrt_je_alloc", "malloc_conf"}) {
    EXPECT_EQ(dlsym(h, fn), nullptr) << fn;
    EXPECT_EQ(dlsym(RTLD_DEFAULT, fn), nullptr) << fn;
  }
  auto run = reinterpret_cast<int (*)()>(dlsym(h, "tierrt_probe_copy_cycle"));
  ASSERT_NE(run, nullptr);
  tierrt::alloc::testing::Env::get().bind();
  EXPECT_EQ(run(), 0);
  // Memory from the application's malloc is libc's before and after.
  void* p = std::malloc(100);
  EXPECT_GE(malloc_usable_size(p), 100u);
  std::free(p);
  EXPECT_TRUE(from_c_library(dlsym(RTLD_DEFAULT, "malloc")));
}

}  // namespace
