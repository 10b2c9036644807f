// The trainer's kernels, written once as plain C++: each body computes the
// outputs of one index (a row, a weight row, a whole sum) with its
// reductions in a fixed order, so a result never depends on how many
// threads ran or in which order. host_kernels.cpp runs the bodies as simdev
// host kernels (one loop over the indices); kernels.cu runs them on a GPU
// (one thread per index).
#pragma once

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TRAINER_HD __host__ __device__ inline
#else
#define TRAINER_HD inline
#endif
// No output aliases an input, so the host compiler may vectorize the loops.
#define TRAINER_RESTRICT __restrict__

namespace trainer::body {

// out[r] = a[r] · w + bias, then ReLU when relu != 0. w holds in + 1 rows of
// out_w: the weights, then the bias.
TRAINER_HD void linear_forward(uint32_t r, const float* TRAINER_RESTRICT a, const float* TRAINER_RESTRICT w,
                               float* TRAINER_RESTRICT out, uint32_t in, uint32_t out_w, uint32_t relu) {
  float* o = out + static_cast<uint64_t>(r) * out_w;
  const float* ar = a + static_cast<uint64_t>(r) * in;
  const float* bias = w + static_cast<uint64_t>(in) * out_w;
  for (uint32_t c = 0; c < out_w; ++c) o[c] = bias[c];
  for (uint32_t k = 0; k < in; ++k) {
    const float av = ar[k];
    const float* wk = w + static_cast<uint64_t>(k) * out_w;
    for (uint32_t c = 0; c < out_w; ++c) o[c] += av * wk[c];
  }
  if (relu)
    for (uint32_t c = 0; c < out_w; ++c) o[c] = o[c] > 0.0f ? o[c] : 0.0f;
}

// Mean squared error of row r: its sum of squares into row_loss[r], and the
// gradient of the mean (grad_scale = 2 / element count) into dout[r].
TRAINER_HD void mse_rows(uint32_t r, const float* TRAINER_RESTRICT out, const float* TRAINER_RESTRICT target,
                         float* TRAINER_RESTRICT dout, float* TRAINER_RESTRICT row_loss, uint32_t width,
                         float grad_scale) {
  const uint64_t base = static_cast<uint64_t>(r) * width;
  float sum = 0.0f;
  for (uint32_t c = 0; c < width; ++c) {
    const float d = out[base + c] - target[base + c];
    sum += d * d;
    dout[base + c] = grad_scale * d;
  }
  row_loss[r] = sum;
}

// total[0] = scale * (x[0] + x[1] + ... + x[n-1]), summed in that order.
TRAINER_HD void scaled_sum(uint32_t, const float* TRAINER_RESTRICT x, float* TRAINER_RESTRICT total, uint32_t n,
                           float scale) {
  float sum = 0.0f;
  for (uint32_t i = 0; i < n; ++i) sum += x[i];
  total[0] = scale * sum;
}

// Row r of the gradient with respect to a layer's input: dz[r] · wᵀ, zero
// where the input (a ReLU output) was not positive.
TRAINER_HD void linear_backward_input(uint32_t r, const float* TRAINER_RESTRICT dz, const float* TRAINER_RESTRICT w,
                                      const float* TRAINER_RESTRICT a, float* TRAINER_RESTRICT da, uint32_t in,
                                      uint32_t out_w) {
  const uint64_t in_base = static_cast<uint64_t>(r) * in, out_base = static_cast<uint64_t>(r) * out_w;
  for (uint32_t k = 0; k < in; ++k) {
    float sum = 0.0f;
    if (a[in_base + k] > 0.0f) {
      const float* wk = w + static_cast<uint64_t>(k) * out_w;
      for (uint32_t c = 0; c < out_w; ++c) sum += dz[out_base + c] * wk[c];
    }
    da[in_base + k] = sum;
  }
}

// Row k of the weight gradient, summed over the batch in row order: aᵀ · dz,
// and for k == in (the bias row) the column sums of dz.
TRAINER_HD void linear_backward_weight(uint32_t k, const float* TRAINER_RESTRICT a, const float* TRAINER_RESTRICT dz,
                                       float* TRAINER_RESTRICT dw, uint32_t rows, uint32_t in, uint32_t out_w) {
  float* g = dw + static_cast<uint64_t>(k) * out_w;
  for (uint32_t c = 0; c < out_w; ++c) g[c] = 0.0f;
  for (uint32_t r = 0; r < rows; ++r) {
    const float av = k == in ? 1.0f : a[static_cast<uint64_t>(r) * in + k];
    const float* dzr = dz + static_cast<uint64_t>(r) * out_w;
    for (uint32_t c = 0; c < out_w; ++c) g[c] += av * dzr[c];
  }
}

// One Adam update of parameter i; step_size carries the bias corrections.
TRAINER_HD void adam(uint32_t i, float* TRAINER_RESTRICT w, const float* TRAINER_RESTRICT g, float* TRAINER_RESTRICT m,
                     float* TRAINER_RESTRICT v, float step_size, float beta1, float beta2, float epsilon) {
  m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
  v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
  w[i] -= step_size * m[i] / (sqrtf(v[i]) + epsilon);
}

}  // namespace trainer::body

// Every kernel: its name, its parameters after the index count (each launch
// passes the count of indices first), the arguments that forward them to its
// body, and the time one launch takes on the device simdev models, in units
// of the trainer's kernel-us setting.
#define TRAINER_KERNELS(X)                                                                                         \
  X(linear_forward, (const float* a, const float* w, float* out, uint32_t in, uint32_t out_w, uint32_t relu),      \
    (a, w, out, in, out_w, relu), 2)                                                                               \
  X(mse_rows,                                                                                                      \
    (const float* out, const float* target, float* dout, float* row_loss, uint32_t width, float grad_scale),       \
    (out, target, dout, row_loss, width, grad_scale), 1)                                                           \
  X(scaled_sum, (const float* x, float* total, uint32_t n, float scale), (x, total, n, scale), 1)                 \
  X(linear_backward_input,                                                                                         \
    (const float* dz, const float* w, const float* a, float* da, uint32_t in, uint32_t out_w),                     \
    (dz, w, a, da, in, out_w), 2)                                                                                  \
  X(linear_backward_weight,                                                                                        \
    (const float* a, const float* dz, float* dw, uint32_t rows, uint32_t in, uint32_t out_w),                      \
    (a, dz, dw, rows, in, out_w), 2)                                                                               \
  X(adam, (float* w, const float* g, float* m, float* v, float step_size, float beta1, float beta2, float epsilon), \
    (w, g, m, v, step_size, beta1, beta2, epsilon), 1)
