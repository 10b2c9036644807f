// The trace reader on any bytes: it refuses with one TraceError line naming
// the file, or returns events that encode back to exactly the bytes read and
// that pass the content checks. Each input is tried as it is and resealed (the
// record count, both checksums and the trailer made to fit), so that the
// record and content checks are reached, not just the checksums.
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "policies/trace/crc32.hpp"
#include "policies/trace/trace_file.hpp"

namespace {

using namespace tierrt::policy;

void put_le(std::byte* p, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

void read(std::span<const std::byte> bytes) {
  try {
    const Trace t = decode_trace(bytes, "fuzz.trace");
    const std::vector<std::byte> again = encode_trace(t);
    FUZZ_CHECK(again.size() == bytes.size() && std::memcmp(again.data(), bytes.data(), bytes.size()) == 0);
    check_trace_contents(t, "fuzz.trace");
  } catch (const TraceError& e) {
    const std::string m = e.what();
    FUZZ_CHECK(m.rfind("fuzz.trace: ", 0) == 0);
    FUZZ_CHECK(m.find('\n') == std::string::npos);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(size);
  if (size) std::memcpy(bytes.data(), data, size);
  read(bytes);
  // Resealed: the records are whole 24-byte records after a 32-byte header.
  if (size < kTraceHeaderBytes) return 0;
  const std::size_t count = (size - kTraceHeaderBytes) / kTraceRecordBytes;
  const std::size_t body = count * kTraceRecordBytes;
  bytes.resize(kTraceHeaderBytes + body + kTraceTrailerBytes);
  std::memcpy(bytes.data(), "TIERRTTR", 8);
  put_le(bytes.data() + 8, kTraceVersion, 4);
  put_le(bytes.data() + 12, kTraceRecordBytes, 4);
  put_le(bytes.data() + 16, count, 8);
  put_le(bytes.data() + 28, 0, 4);
  put_le(bytes.data() + 24, crc32(std::span(bytes.data(), 24)), 4);
  std::byte* trailer = bytes.data() + kTraceHeaderBytes + body;
  put_le(trailer, crc32(std::span(bytes.data() + kTraceHeaderBytes, body)), 4);
  std::memcpy(trailer + 4, "TEND", 4);
  read(bytes);
  return 0;
}
