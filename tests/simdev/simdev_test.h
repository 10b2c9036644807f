// Fixture for simdev-only tests: the driver-contract session plus simdev's
// own entry points, looked up at run time so that the binary still loads
// (and skips) against NVIDIA's driver.
#pragma once

#include <simdev/simdev.h>

#include <cstdlib>
#include <string>

#include "contract.h"

struct SimdevApi {
  int (*inject_fault)(const char*, unsigned long long, int) = nullptr;
  void (*clear_faults)() = nullptr;
  int (*inject_pause)(const char*, unsigned long long) = nullptr;
  int (*wait_paused)(unsigned long long) = nullptr;
  void (*release_pauses)() = nullptr;
  unsigned long long (*device_bytes_in_use)() = nullptr;
  unsigned long long (*host_bytes_in_use)() = nullptr;
};

// simdev's functions, or nullptr when the loaded libcuda.so.1 is not simdev.
const SimdevApi* simdev_api();

class SimdevTest : public DriverTest {
 protected:
  void SetUp() override;
  void TearDown() override;
  const SimdevApi& sim() const { return *api_; }

 private:
  const SimdevApi* api_ = nullptr;
};

// Reads an environment variable a test entry sets; empty when unset.
inline std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// A CUDA module whose image simdev accepts: the kernels are found by name in
// its registry.
CUresult load_any_module(CUmodule* m);
