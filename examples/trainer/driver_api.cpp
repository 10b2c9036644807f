#include "driver_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace trainer {

namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

[[noreturn]] void fail(const char* what, const char* detail) {
  std::fprintf(stderr, "trainer: %s %s\n", what, detail);
  std::exit(1);
}

template <typename Fn>
void resolve(GetProcAddress get, const char* name, Fn* out) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
  if (get(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || !fn ||
      found != CU_GET_PROC_ADDRESS_SUCCESS)
    fail("the driver has no", name);
  *out = reinterpret_cast<Fn>(fn);
}

}  // namespace

Driver load_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) fail("cannot load the CUDA driver:", dlerror());
  auto get = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get) fail("the driver has no", "cuGetProcAddress_v2");
  Driver d;
#define TRAINER_DRIVER_RESOLVE(name) resolve(get, #name, &d.name);
  TRAINER_DRIVER_FUNCTIONS(TRAINER_DRIVER_RESOLVE)
#undef TRAINER_DRIVER_RESOLVE
  return d;
}

const char* error_name(const Driver& d, CUresult r) {
  const char* name = nullptr;
  if (d.cuGetErrorName(r, &name) == CUDA_SUCCESS && name) return name;
  static thread_local char number[32];
  std::snprintf(number, sizeof number, "CUresult %d", static_cast<int>(r));
  return number;
}

void check(const Driver& d, CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  std::fprintf(stderr, "trainer: %s failed: %s\n", call, error_name(d, r));
  std::exit(1);
}

}  // namespace trainer
