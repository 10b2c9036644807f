// Reading and writing the versioned binary trace format (docs/trace-format.md).
// The reader trusts nothing: a truncated, corrupt or wrong-version file is refused
// with a TraceError whose message is one line naming the file and the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "policies/event.hpp"

namespace tierrt::policy {

inline constexpr std::uint32_t kTraceVersion = 1;
inline constexpr std::size_t kTraceHeaderBytes = 32;
inline constexpr std::size_t kTraceRecordBytes = 24;
inline constexpr std::size_t kTraceTrailerBytes = 8;

class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::vector<std::byte> encode_trace(const Trace& trace);
// `name` only labels error messages (usually the path).
Trace decode_trace(std::span<const std::byte> bytes, std::string_view name);

void write_trace_file(const std::string& path, const Trace& trace);
Trace read_trace_file(const std::string& path);

}  // namespace tierrt::policy
