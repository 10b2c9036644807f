#include "kernels.h"

#include <cstdio>
#include <cstdlib>

#include "simdev/simdev.h"

namespace truth {

uint32_t fill_word(uint32_t seed, uint64_t i) {
  uint64_t x = (static_cast<uint64_t>(seed) + 1) * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<uint32_t>(x);
}

void apply_fill(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = fill_word(seed, i);
}

void apply_add(uint32_t* p, size_t n, uint32_t delta) {
  for (size_t i = 0; i < n; ++i) p[i] += delta;
}

void apply_mix(uint32_t* dst, const uint32_t* src, size_t n, uint32_t salt) {
  for (size_t i = 0; i < n; ++i) dst[i] = dst[i] * 3u + (src[i] ^ salt);
}

namespace {

template <typename T>
T param(const simdev_launch* l, unsigned i) {
  return *static_cast<const T*>(l->params[i]);
}

void fill_kernel(const simdev_launch* l) {
  apply_fill(param<uint32_t*>(l, 0), param<uint64_t>(l, 1), param<uint32_t>(l, 2));
}

void add_kernel(const simdev_launch* l) {
  apply_add(param<uint32_t*>(l, 0), param<uint64_t>(l, 1), param<uint32_t>(l, 2));
}

void mix_kernel(const simdev_launch* l) {
  apply_mix(param<uint32_t*>(l, 0), param<const uint32_t*>(l, 1), param<uint64_t>(l, 2), param<uint32_t>(l, 3));
}

void table_kernel(const simdev_launch* l) {
  const auto* table = param<const TableEntry*>(l, 0);
  const uint32_t slots = param<uint32_t>(l, 1), delta = param<uint32_t>(l, 2);
  for (uint32_t j = 0; j < slots; ++j)
    if (table[j].words) apply_add(reinterpret_cast<uint32_t*>(table[j].ptr), table[j].words, table_delta(delta, j));
}

// Each launch keeps its stream busy a little while, as a GPU kernel does, so
// that work on other streams and the host really overlaps it.
constexpr unsigned long long kModeledNs = 40000;

CUfunction load(const Driver& d, CUmodule m, const simdev_kernel_desc& desc) {
  if (simdev_try_register_kernel(&desc) != 0) {
    std::fprintf(stderr, "random_program: runs on simdev only (its kernels are host functions)\n");
    std::exit(1);
  }
  CUfunction f = nullptr;
  if (d.module_get_function(&f, m, desc.name) != CUDA_SUCCESS) {
    std::fprintf(stderr, "random_program: cuModuleGetFunction %s failed\n", desc.name);
    std::exit(1);
  }
  return f;
}

}  // namespace

Kernels load_kernels(const Driver& d) {
  static const size_t one_block[] = {8, 8, 4};
  static const size_t two_blocks[] = {8, 8, 8, 4};
  static const size_t through_table[] = {8, 4, 4};
  CUmodule m = nullptr;
  // simdev resolves names against its registry, so the image is a label.
  if (d.module_load_data(&m, "truth random program kernels") != CUDA_SUCCESS) {
    std::fprintf(stderr, "random_program: cuModuleLoadData failed\n");
    std::exit(1);
  }
  return Kernels{
      load(d, m, {"truth_fill", &fill_kernel, 3, one_block, nullptr, kModeledNs}),
      load(d, m, {"truth_add", &add_kernel, 3, one_block, nullptr, kModeledNs}),
      load(d, m, {"truth_mix", &mix_kernel, 4, two_blocks, nullptr, kModeledNs}),
      load(d, m, {"truth_table", &table_kernel, 3, through_table, nullptr, kModeledNs}),
  };
}

}  // namespace truth
