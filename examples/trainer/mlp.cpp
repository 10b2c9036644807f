#include "mlp.h"

#include <cmath>
#include <cstring>
#include <string>

#include "random.h"

namespace trainer {

namespace {

constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEpsilon = 1e-8f;

CUdeviceptr dev(const float* p) { return reinterpret_cast<CUdeviceptr>(p); }

std::string layer_name(const char* what, size_t l) { return std::string(what) + " of layer " + std::to_string(l + 1); }

}  // namespace

Mlp::Mlp(const Driver& d, DeviceMemory& memory, const Kernels& kernels, CUstream compute, unsigned layers,
         unsigned width, unsigned batch, uint64_t seed, float lr, bool launch_blocking)
    : d_(d),
      memory_(memory),
      k_(kernels),
      compute_(compute),
      width_(width),
      batch_(batch),
      lr_(lr),
      launch_blocking_(launch_blocking) {
  const size_t n = parameter_count();
  std::vector<float> host(n), zeros(n, 0.0f);
  // He-uniform weights, zero biases.
  const float scale = std::sqrt(6.0f / static_cast<float>(width_));
  for (unsigned l = 0; l < layers; ++l) {
    Layer layer{memory_.allocate(n, compute_, layer_name("the weights", l)),
                memory_.allocate(n, compute_, layer_name("Adam's first moment", l)),
                memory_.allocate(n, compute_, layer_name("Adam's second moment", l))};
    for (size_t i = 0; i < n; ++i)
      host[i] = i < static_cast<size_t>(width_) * width_ ? scale * uniform(mix(seed, l), i) : 0.0f;
    check(d_, d_.cuMemcpyHtoDAsync(dev(layer.weights), host.data(), n * sizeof(float), compute_), "cuMemcpyHtoDAsync");
    check(d_, d_.cuMemcpyHtoDAsync(dev(layer.first_moment), zeros.data(), n * sizeof(float), compute_),
          "cuMemcpyHtoDAsync");
    check(d_, d_.cuMemcpyHtoDAsync(dev(layer.second_moment), zeros.data(), n * sizeof(float), compute_),
          "cuMemcpyHtoDAsync");
    // The host vectors are reused for the next layer: copies from pageable
    // memory have read them once the stream is done with them.
    check(d_, d_.cuStreamSynchronize(compute_), "cuStreamSynchronize");
    layers_.push_back(layer);
  }
}

void Mlp::train_step(unsigned step, Batch batch, float* loss) {
  const size_t L = layers_.size();
  const size_t activation = static_cast<size_t>(batch_) * width_;

  // Forward: activations[l] is layer l's input (activations[0] the batch's).
  std::vector<float*> activations{batch.inputs};
  for (size_t l = 0; l < L; ++l) {
    float* out = memory_.allocate(activation, compute_, layer_name("the output", l));
    run(k_.linear_forward, batch_, static_cast<const float*>(activations[l]),
           static_cast<const float*>(layers_[l].weights), out, width_, width_, l + 1 < L ? 1u : 0u);
    activations.push_back(out);
  }

  // Loss: per-row sums of squares, then their total in row order.
  float* dz = memory_.allocate(activation, compute_, "the loss gradient");
  float* row_loss = memory_.allocate(batch_, compute_, "the per-row losses");
  float* total = memory_.allocate(1, compute_, "the loss");
  const float count = static_cast<float>(activation);
  run(k_.mse_rows, batch_, static_cast<const float*>(activations[L]),
         static_cast<const float*>(batch.targets), dz, row_loss, width_, 2.0f / count);
  run(k_.scaled_sum, 1u, static_cast<const float*>(row_loss), total, batch_, 1.0f / count);
  check(d_, d_.cuMemcpyDtoHAsync(loss, dev(total), sizeof(float), compute_), "cuMemcpyDtoHAsync");
  memory_.free(total, compute_);
  memory_.free(row_loss, compute_);
  memory_.free(batch.targets, compute_);
  memory_.free(activations[L], compute_);

  // Backward: each layer's weight gradient, then the gradient of its input,
  // after which the input itself is no longer needed.
  std::vector<float*> gradients(L);
  for (size_t l = L; l-- > 0;) {
    gradients[l] = memory_.allocate(parameter_count(), compute_, layer_name("the weight gradient", l));
    run(k_.linear_backward_weight, width_ + 1, static_cast<const float*>(activations[l]),
           static_cast<const float*>(dz), gradients[l], batch_, width_, width_);
    float* dinput = nullptr;
    if (l > 0) {
      dinput = memory_.allocate(activation, compute_, layer_name("the input gradient", l));
      run(k_.linear_backward_input, batch_, static_cast<const float*>(dz),
             static_cast<const float*>(layers_[l].weights), static_cast<const float*>(activations[l]), dinput,
             width_, width_);
    }
    memory_.free(dz, compute_);
    memory_.free(activations[l], compute_);
    dz = dinput;
  }

  // Optimizer: Adam, its bias corrections folded into the step size.
  const double t = step;
  const float step_size = static_cast<float>(lr_ * std::sqrt(1.0 - std::pow(kBeta2, t)) / (1.0 - std::pow(kBeta1, t)));
  const auto n = static_cast<uint32_t>(parameter_count());
  for (size_t l = 0; l < L; ++l) {
    run(k_.adam, n, layers_[l].weights, static_cast<const float*>(gradients[l]),
           layers_[l].first_moment, layers_[l].second_moment, step_size, kBeta1, kBeta2, kEpsilon);
    memory_.free(gradients[l], compute_);
  }
}

uint64_t Mlp::checksum() const {
  check(d_, d_.cuStreamSynchronize(compute_), "cuStreamSynchronize");
  std::vector<float> host(parameter_count());
  uint64_t h = 0xCBF29CE484222325ull;
  for (const Layer& layer : layers_) {
    check(d_, d_.cuMemcpyDtoHAsync(host.data(), dev(layer.weights), host.size() * sizeof(float), compute_),
          "cuMemcpyDtoHAsync");
    check(d_, d_.cuStreamSynchronize(compute_), "cuStreamSynchronize");
    const auto* bytes = reinterpret_cast<const unsigned char*>(host.data());
    for (size_t i = 0; i < host.size() * sizeof(float); ++i) h = (h ^ bytes[i]) * 0x100000001B3ull;
  }
  return h;
}

void Mlp::release() {
  for (const Layer& layer : layers_) {
    memory_.free(layer.weights, compute_);
    memory_.free(layer.first_moment, compute_);
    memory_.free(layer.second_moment, compute_);
  }
  layers_.clear();
}

}  // namespace trainer
