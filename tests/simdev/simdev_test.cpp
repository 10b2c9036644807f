#include "simdev_test.h"

#include <dlfcn.h>

namespace {

// simdev.h declares these, but linking them directly would keep the binary
// from loading against NVIDIA's driver; look them up instead.
void* lookup(const char* name) { return dlsym(RTLD_DEFAULT, name); }

}  // namespace

const SimdevApi* simdev_api() {
  static const SimdevApi api = [] {
    SimdevApi a;
    a.inject_fault = reinterpret_cast<int (*)(const char*, unsigned long long, int)>(
        lookup("simdev_inject_fault"));
    a.clear_faults = reinterpret_cast<void (*)()>(lookup("simdev_clear_faults"));
    a.inject_pause =
        reinterpret_cast<int (*)(const char*, unsigned long long)>(lookup("simdev_inject_pause"));
    a.wait_paused = reinterpret_cast<int (*)(unsigned long long)>(lookup("simdev_wait_paused"));
    a.release_pauses = reinterpret_cast<void (*)()>(lookup("simdev_release_pauses"));
    a.device_bytes_in_use =
        reinterpret_cast<unsigned long long (*)()>(lookup("simdev_device_bytes_in_use"));
    a.host_bytes_in_use =
        reinterpret_cast<unsigned long long (*)()>(lookup("simdev_host_bytes_in_use"));
    return a;
  }();
  if (!simdev_present() || !api.inject_fault || !api.clear_faults || !api.inject_pause || !api.wait_paused ||
      !api.release_pauses || !api.device_bytes_in_use || !api.host_bytes_in_use)
    return nullptr;
  return &api;
}

void SimdevTest::SetUp() {
  if (!simdev_present()) GTEST_SKIP() << "libcuda.so.1 is not simdev";
  api_ = simdev_api();
  ASSERT_NE(nullptr, api_) << "simdev lacks one of the functions simdev.h declares";
  DriverTest::SetUp();
}

void SimdevTest::TearDown() {
  if (api_) api_->clear_faults();
  if (api_) DriverTest::TearDown();
}

CUresult load_any_module(CUmodule* m) { return cuModuleLoadData(m, contract::kernels_image()); }
