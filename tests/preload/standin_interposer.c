/* Another library that wraps the CUDA driver, as profilers and tracers do:
 * it counts calls of three driver functions and passes them on to whatever
 * dlsym(RTLD_NEXT, ...) finds after it. Preloaded in front of libtierrt.so,
 * its calls go on to tierrt's wrappers and from there to the driver;
 * preloaded behind it, the lookups it makes (standin_lookup) must find
 * tierrt's wrappers too, never the driver's functions around them. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>

static unsigned long g_calls;

void* standin_lookup(const char* name) { return dlsym(RTLD_NEXT, name); }

unsigned long standin_calls(void) { return __atomic_load_n(&g_calls, __ATOMIC_RELAXED); }

#define NEXT(fn_type, name)                                                  \
  static fn_type next;                                                       \
  if (next == NULL) next = (fn_type)dlsym(RTLD_NEXT, name);                  \
  __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED);                         \
  if (next == NULL) return CUDA_ERROR_NOT_INITIALIZED;

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  typedef CUresult (*Fn)(CUdeviceptr*, size_t);
  NEXT(Fn, "cuMemAlloc_v2")
  return next(p, bytes);
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr p) {
  typedef CUresult (*Fn)(CUdeviceptr);
  NEXT(Fn, "cuMemFree_v2")
  return next(p);
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned shared, CUstream s, void** params, void** extra) {
  typedef CUresult (*Fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                         void**, void**);
  NEXT(Fn, "cuLaunchKernel")
  return next(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}
