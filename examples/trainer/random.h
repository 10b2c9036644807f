// Counter-based random numbers: the same seed and index give the same value
// on every run, whatever the order they are asked for.
#pragma once

#include <stdint.h>

namespace trainer {

// SplitMix64's finaliser over a seed and an index.
inline uint64_t mix(uint64_t seed, uint64_t index) {
  uint64_t x = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1), exactly representable (24 random bits).
inline float uniform(uint64_t seed, uint64_t index) {
  return static_cast<float>(static_cast<int32_t>(mix(seed, index) >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
}

}  // namespace trainer
