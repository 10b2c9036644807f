// Configuration from the environment: a small parser for byte sizes and
// choices, meant to grow with the variables later parts of tierrt read.
// Every error is one line naming the variable, the value and what is accepted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "allocator/spill_mode.h"

namespace tierrt::config {

// A byte size, absolute ("24GiB") or relative ("90%") to a whole that is only
// known later (the device's or the host's memory).
struct ByteSize {
  std::uint64_t bytes = 0;  // absolute value when !relative
  double fraction = 0.0;    // 0 < fraction <= 1 when relative
  bool relative = false;

  std::uint64_t resolve(std::uint64_t whole) const noexcept;
  static ByteSize absolute(std::uint64_t b) noexcept { return {b, 0.0, false}; }
};

// Parses "1073741824", "512 MiB", "1.5GiB", "64k", "2 GB" (decimal), "90%".
// Units (case-insensitive): B; K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024);
// KB, MB, GB, TB (powers of 1000). Percentages only when allow_percent.
// On failure returns nullopt and sets *error to a one-line message.
std::optional<ByteSize> parse_byte_size(std::string_view variable,
                                        std::string_view value,
                                        bool allow_percent, std::string* error);

// Parses one of `choices` (case-insensitive), returning its index.
std::optional<int> parse_choice(std::string_view variable, std::string_view value,
                                std::initializer_list<std::string_view> choices,
                                std::string* error);

// The variables the allocator reads.
struct AllocatorConfig {
  std::optional<ByteSize> device_budget;  // TIERRT_DEVICE_BUDGET (bytes or %)
  std::optional<ByteSize> host_budget;    // TIERRT_HOST_BUDGET (bytes or %)
  std::uint64_t min_bytes = 1ull << 20;   // TIERRT_MIN_BYTES (bytes)
  alloc::SpillMode spill_mode = alloc::SpillMode::Auto;  // TIERRT_SPILL_MODE (auto|remap|copy)
};

// Reads the allocator's variables through `getenv_fn` (std::getenv by
// default). Returns false and sets *error on the first bad value.
using GetenvFn = const char* (*)(const char*);
bool read_allocator_config(AllocatorConfig* out, std::string* error,
                           GetenvFn getenv_fn = nullptr);

}  // namespace tierrt::config
