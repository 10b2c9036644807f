// The trainer's kernels for a GPU: one thread per index, each running the
// same body the simdev host kernels run.
#include "kernel_bodies.h"

#define TRAINER_UNPAREN(...) __VA_ARGS__
#define TRAINER_GPU_KERNEL(name, params, args, cost)                                  \
  extern "C" __global__ void trainer_##name(uint32_t count, TRAINER_UNPAREN params) { \
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;                         \
    if (i < count) trainer::body::name(i, TRAINER_UNPAREN args);                      \
  }
TRAINER_KERNELS(TRAINER_GPU_KERNEL)
