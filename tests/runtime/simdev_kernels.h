// A context on simdev's device with two kernels registered, for the engine's
// in-process tests: `write` fills an activation with a pattern, `check`
// counts the words that differ from it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "driver/driver.h"
#include "simdev/simdev.h"

namespace tierrt::testing_simdev {

inline std::uint32_t pattern(std::uint32_t step, std::uint32_t layer, size_t i) {
  return step * 31u + layer * 1009u + static_cast<std::uint32_t>(i);
}

// write(out, n, step, layer)
inline void write_kernel(const simdev_launch* l) {
  auto* out = *static_cast<std::uint32_t* const*>(l->params[0]);
  size_t n = *static_cast<const size_t*>(l->params[1]);
  std::uint32_t step = *static_cast<const std::uint32_t*>(l->params[2]);
  std::uint32_t layer = *static_cast<const std::uint32_t*>(l->params[3]);
  for (size_t i = 0; i < n; i += 64) out[i] = pattern(step, layer, i);
}

// check(act, n, step, layer, bad): *bad += words of act that differ.
inline void check_kernel(const simdev_launch* l) {
  auto* act = *static_cast<std::uint32_t* const*>(l->params[0]);
  size_t n = *static_cast<const size_t*>(l->params[1]);
  std::uint32_t step = *static_cast<const std::uint32_t*>(l->params[2]);
  std::uint32_t layer = *static_cast<const std::uint32_t*>(l->params[3]);
  auto* bad = *static_cast<std::uint32_t* const*>(l->params[4]);
  for (size_t i = 0; i < n; i += 64)
    if (act[i] != pattern(step, layer, i)) *bad += 1;
}

struct Kernels {
  CUcontext ctx = nullptr;
  CUfunction write = nullptr, check = nullptr;
};

// Registers the kernels and makes the device's primary context current.
inline void set_up(Kernels* k) {
  ASSERT_TRUE(drv::loaded());
  // The driver is loaded by tierrt's own table, privately: ask it directly.
  auto reg = reinterpret_cast<int (*)(const simdev_kernel_desc*)>(drv::resolve("simdev_register_kernel"));
  ASSERT_NE(nullptr, reg) << "runs on simdev";
  static const size_t write_sizes[] = {8, 8, 4, 4}, check_sizes[] = {8, 8, 4, 4, 8};
  simdev_kernel_desc w{"tierrt_test_write", &write_kernel, 4, write_sizes, nullptr, 100000};
  simdev_kernel_desc c{"tierrt_test_check", &check_kernel, 5, check_sizes, nullptr, 100000};
  ASSERT_EQ(0, reg(&w));
  ASSERT_EQ(0, reg(&c));
  CUdevice dev;
  CUmodule m;
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuInit, 0));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuDeviceGet, &dev, 0));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuDevicePrimaryCtxRetain, &k->ctx, dev));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSetCurrent, k->ctx));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuModuleLoadData, &m, "simdev"));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuModuleGetFunction, &k->write, m, "tierrt_test_write"));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuModuleGetFunction, &k->check, m, "tierrt_test_check"));
}

}  // namespace tierrt::testing_simdev
