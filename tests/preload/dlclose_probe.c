/* A program that reaches the driver only through dlopen, as Python
 * extensions and plugin loaders do, and lets go of it in between: it
 * oversubscribes the device, frees everything, dlcloses the driver, opens
 * it again and does it all once more. Under tierrt the hooks it was handed
 * and tierrt's own threads must outlive its handle (tierrt holds one of its
 * own), and the second round finds tierrt still tiering. Links no CUDA
 * library. Usage: dlclose_probe (exit 0 when every byte came back). */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*InitFn)(unsigned);
typedef CUresult (*DeviceGetFn)(CUdevice*, int);
typedef CUresult (*RetainFn)(CUcontext*, CUdevice);
typedef CUresult (*SetCurrentFn)(CUcontext);
typedef CUresult (*MemInfoFn)(size_t*, size_t*);
typedef CUresult (*AllocFn)(CUdeviceptr*, size_t);
typedef CUresult (*FreeFn)(CUdeviceptr);
typedef CUresult (*HtoDFn)(CUdeviceptr, const void*, size_t);
typedef CUresult (*DtoHFn)(void*, CUdeviceptr, size_t);

static void* must(void* h, const char* name) {
  void* f = dlsym(h, name);
  if (f == NULL) {
    fprintf(stderr, "dlclose_probe: dlsym %s: %s\n", name, dlerror());
    exit(1);
  }
  return f;
}

static void check(CUresult r, const char* what, int round) {
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "dlclose_probe: round %d: %s failed with CUresult %d\n", round, what, (int)r);
    exit(1);
  }
}

static int one_round(int round) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "dlclose_probe: dlopen: %s\n", dlerror());
    exit(1);
  }
  InitFn init = (InitFn)must(h, "cuInit");
  DeviceGetFn device_get = (DeviceGetFn)must(h, "cuDeviceGet");
  RetainFn retain = (RetainFn)must(h, "cuDevicePrimaryCtxRetain");
  SetCurrentFn set_current = (SetCurrentFn)must(h, "cuCtxSetCurrent");
  MemInfoFn mem_info = (MemInfoFn)must(h, "cuMemGetInfo_v2");
  AllocFn alloc = (AllocFn)must(h, "cuMemAlloc_v2");
  FreeFn free_ = (FreeFn)must(h, "cuMemFree_v2");
  HtoDFn htod = (HtoDFn)must(h, "cuMemcpyHtoD_v2");
  DtoHFn dtoh = (DtoHFn)must(h, "cuMemcpyDtoH_v2");
  CUdevice dev;
  CUcontext ctx;
  check(init(0), "cuInit", round);
  check(device_get(&dev, 0), "cuDeviceGet", round);
  check(retain(&ctx, dev), "cuDevicePrimaryCtxRetain", round);
  check(set_current(ctx), "cuCtxSetCurrent", round);
  size_t free_bytes = 0, total = 0;
  check(mem_info(&free_bytes, &total), "cuMemGetInfo", round);
  const size_t block = 16u << 20, n = 2 * total / block, words = block / 4;
  CUdeviceptr* blocks = calloc(n, sizeof *blocks);
  uint32_t* buf = malloc(block);
  for (size_t i = 0; i < n; ++i) {
    check(alloc(&blocks[i], block), "cuMemAlloc", round);
    for (size_t w = 0; w < words; ++w) buf[w] = (uint32_t)(i * 2654435761u + w + round);
    check(htod(blocks[i], buf, block), "cuMemcpyHtoD", round);
  }
  for (size_t i = 0; i < n; ++i) {
    check(dtoh(buf, blocks[i], block), "cuMemcpyDtoH", round);
    for (size_t w = 0; w < words; ++w)
      if (buf[w] != (uint32_t)(i * 2654435761u + w + round)) {
        fprintf(stderr, "dlclose_probe: round %d: block %zu word %zu changed\n", round, i, w);
        exit(1);
      }
    check(free_(blocks[i]), "cuMemFree", round);
  }
  free(blocks);
  free(buf);
  printf("round %d: %zu x %zu MiB on a %zu MiB device, every byte back\n", round, n, block >> 20, total >> 20);
  return dlclose(h);
}

int main(void) {
  if (one_round(1) != 0) return 1;
  /* The application's handle is gone; tierrt's threads and hooks are not. */
  if (one_round(2) != 0) return 1;
  return 0;
}
