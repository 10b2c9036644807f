// The program's kernels: what each does to 32-bit words, as host code shared
// by the simdev kernels and the program's host mirror, so that the mirror
// predicts every byte a kernel writes.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "driver_table.h"

namespace truth {

// The word a fill with `seed` writes at index i.
uint32_t fill_word(uint32_t seed, uint64_t i);

void apply_fill(uint32_t* p, size_t n, uint32_t seed);
void apply_add(uint32_t* p, size_t n, uint32_t delta);
void apply_mix(uint32_t* dst, const uint32_t* src, size_t n, uint32_t salt);

// A pointer table in device memory, as batched GEMM pointer arrays and
// collective work queues hold them: the table kernel reaches its blocks only
// through these entries. An entry with words == 0 is unused.
struct TableEntry {
  uint64_t ptr;
  uint64_t words;
};
constexpr uint32_t kTableSlots = 8;
// Entry j of a table kernel adds delta + j to every word it names.
constexpr uint32_t table_delta(uint32_t delta, uint32_t j) { return delta + j; }

struct Kernels {
  CUfunction fill;   // (uint32_t* p, uint64_t n, uint32_t seed)
  CUfunction add;    // (uint32_t* p, uint64_t n, uint32_t delta)
  CUfunction mix;    // (uint32_t* dst, const uint32_t* src, uint64_t n, uint32_t salt)
  CUfunction table;  // (const TableEntry* table, uint32_t slots, uint32_t delta)
};

// Registers the host kernels with simdev and finds them as a GPU program
// finds its kernels; exits with one line when the driver is not simdev.
Kernels load_kernels(const Driver& d);

}  // namespace truth
