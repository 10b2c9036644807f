// A data loader: makes each batch on the host into pinned memory and copies
// it to the device on a stream of its own, one step ahead of the compute
// stream, which waits for the copy's event before it uses the batch.
#pragma once

#include <cuda.h>
#include <stdint.h>

#include "device_memory.h"
#include "driver_api.h"

namespace trainer {

struct Batch {
  float* inputs;   // batch x width
  float* targets;  // batch x width
};

class DataLoader {
 public:
  DataLoader(const Driver& d, DeviceMemory& memory, unsigned batch, unsigned width, uint64_t seed);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts the copy of step's batch (steps count from 1).
  void issue(unsigned step);
  // Step's batch, issued before, ready for work on compute once it reaches
  // this point. The caller frees both tensors.
  Batch take(unsigned step, CUstream compute);

 private:
  struct Slot {
    float* host = nullptr;  // inputs then targets, pinned
    CUevent copied = nullptr;
    Batch batch{};
  };
  Slot& slot(unsigned step) { return slots_[step % 2]; }
  void make_batch(unsigned step, float* inputs, float* targets) const;

  const Driver& d_;
  DeviceMemory& memory_;
  CUstream stream_ = nullptr;
  const unsigned batch_, width_;
  const uint64_t seed_;
  Slot slots_[2];
};

}  // namespace trainer
