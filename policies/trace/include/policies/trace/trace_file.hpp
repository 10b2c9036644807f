// Reading and writing the versioned binary trace format (docs/trace-format.md).
// The reader trusts nothing: a truncated, corrupt or wrong-version file, one that
// is not a regular file, or one whose events are impossible (uses before
// allocation, launch numbers going down, sizes beyond 2^48) is refused with a
// TraceError whose message is one line naming the file and the problem (and the
// record, for a bad one). It reads no more than the file holds.
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
// The largest size, duration or rate a record may carry: 256 TiB, 78 hours.
inline constexpr std::uint64_t kTraceMaxValue = 1ull << 48;

class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::vector<std::byte> encode_trace(const Trace& trace);
// `name` only labels error messages (usually the path).
Trace decode_trace(std::span<const std::byte> bytes, std::string_view name);
// Whether the events can have happened: every block allocated once before it
// is used, tagged or freed, launch numbers increasing, each use naming the
// launch it follows, sizes and rates within kTraceMaxValue. decode_trace
// checks it; refuses with the index and file offset of the first bad record.
void check_trace_contents(const Trace& trace, std::string_view name);

void write_trace_file(const std::string& path, const Trace& trace);
Trace read_trace_file(const std::string& path);

}  // namespace tierrt::policy
