// The trainer's kernels as the driver's functions, and one way to launch them.
#pragma once

#include <cuda.h>
#include <stdint.h>

#include "driver_api.h"
#include "kernel_bodies.h"

namespace trainer {

struct Kernels {
#define TRAINER_KERNEL_HANDLE(name, params, args, cost) CUfunction name = nullptr;
  TRAINER_KERNELS(TRAINER_KERNEL_HANDLE)
#undef TRAINER_KERNEL_HANDLE
};

// On simdev: registers the bodies as host kernels, each launch keeping its
// stream busy for its cost times kernel_us microseconds at least (0: as long
// as it computes). On a GPU: loads the module nvcc built from the same
// bodies. Exits with one line when neither is possible.
Kernels load_kernels(const Driver& d, unsigned kernel_us);

// Launches f on stream over count indices: the count first, then args.
template <typename... Args>
void launch(const Driver& d, CUfunction f, CUstream stream, uint32_t count, Args... args) {
  void* params[] = {&count, &args...};
  constexpr unsigned kThreads = 128;
  check(d, d.cuLaunchKernel(f, (count + kThreads - 1) / kThreads, 1, 1, kThreads, 1, 1, 0, stream, params, nullptr),
        "cuLaunchKernel");
}

}  // namespace trainer
