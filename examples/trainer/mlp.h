// The model: `layers` fully connected layers of `width` features, ReLU
// after each but the last, trained for mean squared error with Adam. Like an
// eager framework, each step allocates its activations in the forward pass,
// keeps them for the backward pass and frees each once its gradient is done.
#pragma once

#include <cuda.h>
#include <stdint.h>

#include <vector>

#include "data_loader.h"
#include "device_memory.h"
#include "driver_api.h"
#include "kernels.h"

namespace trainer {

class Mlp {
 public:
  Mlp(const Driver& d, DeviceMemory& memory, const Kernels& kernels, CUstream compute, unsigned layers,
      unsigned width, unsigned batch, uint64_t seed, float lr, bool launch_blocking);

  // Enqueues one training step (steps count from 1) on the compute stream:
  // forward, loss, backward, optimizer. Frees the batch. The step's loss is
  // in *loss once the compute stream has reached this point.
  void train_step(unsigned step, Batch batch, float* loss);

  // FNV-1a of every parameter's bytes (waits for the compute stream).
  uint64_t checksum() const;

  // Frees the parameters and the optimizer's state.
  void release();

 private:
  struct Layer {
    float* weights;  // (width + 1) x width: the weights, then the bias row
    float* first_moment;
    float* second_moment;
  };
  // Launches f on the compute stream, and waits for it when launches block.
  template <typename... Args>
  void run(CUfunction f, uint32_t count, Args... args) {
    launch(d_, f, compute_, count, args...);
    if (launch_blocking_) check(d_, d_.cuStreamSynchronize(compute_), "cuStreamSynchronize");
  }
  size_t parameter_count() const { return static_cast<size_t>(width_ + 1) * width_; }

  const Driver& d_;
  DeviceMemory& memory_;
  const Kernels& k_;
  CUstream compute_;
  const unsigned width_, batch_;
  const float lr_;
  const bool launch_blocking_;
  std::vector<Layer> layers_;
};

}  // namespace trainer
