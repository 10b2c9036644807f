/*
 * simdev.h: the only simdev-specific interface. Everything else a program
 * does with simdev goes through <cuda.h>, unchanged.
 *
 * A "kernel" on simdev is a host function that does the whole grid's work in
 * one call. A program registers its host kernels by name and then finds them
 * the way it would on a GPU (cuModuleLoadData + cuModuleGetFunction, or
 * cuLibraryLoadData + cuLibraryGetKernel): simdev accepts any module image and
 * resolves function names against the registry. So one source can carry PTX
 * for a GPU and host kernels for simdev.
 *
 * Host kernels dereference device pointers directly, as GPU code does. A
 * kernel that touches device memory that is not mapped stops at that access
 * (simdev leaves it with siglongjmp, so no destructor of its frames runs) and
 * the context gets CUDA_ERROR_ILLEGAL_ADDRESS; a kernel should therefore not
 * hold locks or own resources while it touches device memory.
 *
 * Programs that must also run against NVIDIA's driver call the
 * simdev_try_* helpers below, which look simdev up at run time and do nothing
 * when the loaded libcuda.so.1 is not simdev.
 */
#ifndef SIMDEV_SIMDEV_H
#define SIMDEV_SIMDEV_H

#include <stddef.h>
#include <dlfcn.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct simdev_launch {
  unsigned int grid[3];
  unsigned int block[3];
  unsigned int shared_bytes;
  unsigned int num_params;
  /* params[i] points at a private copy of parameter i, taken at launch time. */
  void* const* params;
} simdev_launch;

typedef void (*simdev_kernel_fn)(const simdev_launch* launch);

typedef struct simdev_kernel_desc {
  const char* name;              /* the name cuModuleGetFunction looks up */
  simdev_kernel_fn fn;
  unsigned int num_params;
  const size_t* param_sizes;     /* num_params entries */
  /* Optional: byte offsets of the parameters in the parameter buffer. NULL
   * means natural layout: each parameter aligned to min(size rounded up to a
   * power of two, 8). */
  const size_t* param_offsets;
  /* Modeled duration of one launch; the stream is busy at least this long.
   * 0 means "as long as the host function takes". */
  unsigned long long modeled_ns;
} simdev_kernel_desc;

/* Registers (or replaces) a kernel. Returns 0, or -1 on a bad descriptor.
 * May be called before cuInit. */
int simdev_register_kernel(const simdev_kernel_desc* desc);

/* Arms fault injection from now on: the nth call (1-based, counted from this
 * call) of the exported function `name` fails with `error` (a CUresult; 0
 * picks the error that function documents for resource failure). Same effect
 * as SIMDEV_FAIL="name:nth" in the environment. Returns 0, or -1 for an
 * unknown function name. */
int simdev_inject_fault(const char* name, unsigned long long nth, int error);

/* Arms a pause from now on: the nth call (1-based, counted from this call)
 * of the exported function `name` waits, before doing anything, until
 * simdev_release_pauses(). A test holds one thread at a chosen driver call
 * to make an interleaving happen every time. Returns 0, or -1 for an unknown
 * function name. */
int simdev_inject_pause(const char* name, unsigned long long nth);

/* 1 once a call is held by a pause (waiting up to `ms` for one), else 0. */
int simdev_wait_paused(unsigned long long ms);

/* Every call held by a pause goes on. */
void simdev_release_pauses(void);

/* Clears every armed fault (and pause not yet reached). */
void simdev_clear_faults(void);

/* How many armed faults have made their call fail since the process began:
 * whether an armed fault was reached at all. */
unsigned long long simdev_faults_fired(void);

/* Device bytes in use right now (what cuMemGetInfo's total - free reports). */
unsigned long long simdev_device_bytes_in_use(void);

/* Host bytes held by HOST / HOST_NUMA physical allocations right now. */
unsigned long long simdev_host_bytes_in_use(void);

/* --- run-time lookup, so that the same program runs on NVIDIA's driver --- */

static inline void* simdev_lookup_(const char* sym) {
  return dlsym(RTLD_DEFAULT, sym);
}

/* Non-zero when the libcuda.so.1 in this process is simdev. */
static inline int simdev_present(void) {
  return simdev_lookup_("simdev_register_kernel") != NULL;
}

/* Registers a kernel when simdev is present; returns -1 otherwise. */
static inline int simdev_try_register_kernel(const simdev_kernel_desc* desc) {
  int (*fn)(const simdev_kernel_desc*) =
      (int (*)(const simdev_kernel_desc*))simdev_lookup_("simdev_register_kernel");
  return fn ? fn(desc) : -1;
}

/* Fault injection when simdev is present; -1 otherwise. */
static inline int simdev_try_inject_fault(const char* name, unsigned long long nth, int error) {
  int (*fn)(const char*, unsigned long long, int) =
      (int (*)(const char*, unsigned long long, int))simdev_lookup_("simdev_inject_fault");
  return fn ? fn(name, nth, error) : -1;
}

static inline void simdev_try_clear_faults(void) {
  void (*fn)(void) = (void (*)(void))simdev_lookup_("simdev_clear_faults");
  if (fn) fn();
}

/* 0 on NVIDIA's driver, where no fault is ever injected. */
static inline unsigned long long simdev_try_faults_fired(void) {
  unsigned long long (*fn)(void) = (unsigned long long (*)(void))simdev_lookup_("simdev_faults_fired");
  return fn ? fn() : 0;
}

#ifdef __cplusplus
}
#endif

#endif /* SIMDEV_SIMDEV_H */
