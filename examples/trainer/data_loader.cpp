#include "data_loader.h"

#include <cmath>
#include <cstring>
#include <string>

#include "random.h"

namespace trainer {

DataLoader::DataLoader(const Driver& d, DeviceMemory& memory, unsigned batch, unsigned width, uint64_t seed)
    : d_(d), memory_(memory), batch_(batch), width_(width), seed_(seed) {
  check(d_, d_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  const size_t bytes = 2 * static_cast<size_t>(batch_) * width_ * sizeof(float);
  for (Slot& s : slots_) {
    void* host = nullptr;
    check(d_, d_.cuMemAllocHost(&host, bytes), "cuMemAllocHost");
    s.host = static_cast<float*>(host);
    check(d_, d_.cuEventCreate(&s.copied, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
}

DataLoader::~DataLoader() {
  check(d_, d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  for (Slot& s : slots_) {
    check(d_, d_.cuEventDestroy(s.copied), "cuEventDestroy");
    check(d_, d_.cuMemFreeHost(s.host), "cuMemFreeHost");
  }
  check(d_, d_.cuStreamDestroy(stream_), "cuStreamDestroy");
}

// Inputs uniform in [-1, 1); each target feature is the absolute value of
// another input feature, less one half: a ReLU network can learn it.
void DataLoader::make_batch(unsigned step, float* inputs, float* targets) const {
  const size_t n = static_cast<size_t>(batch_) * width_;
  const uint64_t stream = mix(seed_ ^ 0xDA7A5E7ull, step);
  for (size_t i = 0; i < n; ++i) inputs[i] = uniform(stream, i);
  for (size_t r = 0; r < batch_; ++r)
    for (size_t c = 0; c < width_; ++c)
      targets[r * width_ + c] = std::fabs(inputs[r * width_ + (c * 7 + 3) % width_]) - 0.5f;
}

void DataLoader::issue(unsigned step) {
  Slot& s = slot(step);
  // The slot's last copy (two steps back) must be done before its host
  // buffer is written again.
  check(d_, d_.cuEventSynchronize(s.copied), "cuEventSynchronize");
  const size_t n = static_cast<size_t>(batch_) * width_;
  make_batch(step, s.host, s.host + n);
  const std::string which = "the batch of step " + std::to_string(step);
  s.batch.inputs = memory_.allocate(n, stream_, "the inputs of " + which);
  s.batch.targets = memory_.allocate(n, stream_, "the targets of " + which);
  check(d_, d_.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(s.batch.inputs), s.host, n * sizeof(float), stream_),
        "cuMemcpyHtoDAsync");
  check(d_,
        d_.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(s.batch.targets), s.host + n, n * sizeof(float), stream_),
        "cuMemcpyHtoDAsync");
  check(d_, d_.cuEventRecord(s.copied, stream_), "cuEventRecord");
}

Batch DataLoader::take(unsigned step, CUstream compute) {
  Slot& s = slot(step);
  check(d_, d_.cuStreamWaitEvent(compute, s.copied, 0), "cuStreamWaitEvent");
  return s.batch;
}

}  // namespace trainer
