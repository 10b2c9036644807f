// The trainer's settings, from key=value arguments.
#pragma once

#include <stdint.h>

namespace trainer {

struct Options {
  unsigned layers = 12;
  unsigned width = 32;
  unsigned batch = 16384;
  unsigned steps = 8;
  uint64_t seed = 1;
  float lr = 1e-3f;
  bool mark_steps = false;
  // Wait for each kernel before going on (CUDA_LAUNCH_BLOCKING=1 in
  // frameworks); otherwise the host runs up to a step ahead of the device.
  bool launch_blocking = false;
  // Modeled time of the cheapest kernel on simdev, in microseconds.
  unsigned kernel_us = 1500;
};

// Parses argv[1..]; prints the usage and exits on "help" or a bad argument.
Options parse_options(int argc, char** argv);

}  // namespace trainer
