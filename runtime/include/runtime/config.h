// Parsing of configuration values: byte sizes and choices, on their own so
// that tools check a value the way the runtime will (runtime/settings.h
// holds the variables). Every error is one line naming the variable, the
// value and what is accepted.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

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

// The one-line refusal of a bad value: the variable, the value and what is
// accepted ("tierrt: V="x" is not accepted; expected ...").
// `value` with control characters as \xNN: a message that quotes it stays
// one line whatever it holds.
std::string printable(std::string_view value);
std::string refusal(std::string_view variable, std::string_view value, std::string_view accepted);

// A value as choices are compared: without surrounding blanks, lower-case.
std::string normalized(std::string_view value);

// Reads a variable: std::getenv, or a stand-in in tests.
using GetenvFn = const char* (*)(const char*);

// An output file's name as given (TIERRT_STATS, TIERRT_TRACE, ...) with %p
// replaced by the process id, %r by the rank and %l by the local rank
// (runtime/rank.h; "0" when not known or malformed), %h by the host name
// (its first label) and %% by %. Expanded where the file is opened, so that
// forked children and the ranks of a job each write a file of their own.
std::string expand_output_path(std::string_view pattern, GetenvFn getenv_fn = nullptr);

// An output name for the engine of device `device`: %d becomes the device
// ordinal; a name without %d gets ".devN" before its extension when `mark`
// (every engine after a process's first, so that no two write one file).
// "-" (stderr) and "" stay as they are. The rest is left for
// expand_output_path.
std::string device_output_path(std::string_view pattern, int device, bool mark);

}  // namespace tierrt::config
