// The trace reader must refuse truncated, corrupt and wrong-version files with a
// one-line message, and read back exactly what was written.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "policies/eval/transformer_synth.hpp"
#include "policies/trace/crc32.hpp"
#include "policies/trace/trace_file.hpp"
#include "test_models.hpp"

namespace tierrt::policy {
namespace {

Trace sample() {
  return {Event::alloc(1, 4096, 2), Event::alloc(2, 8192, 0, /*lazy=*/true), Event::launch(0, 1500), Event::use(1, 0, 2), Event::phase(Phase::Backward),
          Event::copy_rate(CopyDir::HostToDevice, 53'000'000'000ull), Event::tag(1, Role::Query, 7),
          Event::sync(), Event::step(3), Event::free(1)};
}

std::string error_of(const std::vector<std::byte>& bytes) {
  try {
    decode_trace(bytes, "t.trace");
  } catch (const TraceError& e) {
    return e.what();
  }
  return "";
}

void put_u32(std::vector<std::byte>& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<std::byte>(v >> (8 * i));
}

void reseal_header(std::vector<std::byte>& b) { put_u32(b, 24, crc32(std::span(b.data(), 24))); }

void reseal_body(std::vector<std::byte>& b) {
  const std::size_t body = b.size() - kTraceHeaderBytes - kTraceTrailerBytes;
  put_u32(b, kTraceHeaderBytes + body, crc32(std::span(b.data() + kTraceHeaderBytes, body)));
}

TEST(TraceFile, RoundTripsEveryEventKind) {
  const Trace t = sample();
  EXPECT_EQ(decode_trace(encode_trace(t), "x"), t);
}

TEST(TraceFile, RoundTripsThroughAFile) {
  const Trace t = synthesize(test::tiny_options(test::tiny_dense(), 2));
  const auto path = (std::filesystem::temp_directory_path() / ("tierrt-trace-" + std::to_string(::getpid()))).string();
  write_trace_file(path, t);
  EXPECT_EQ(read_trace_file(path), t);
  std::filesystem::remove(path);
}

TEST(TraceFile, KnownChecksum) {
  // The IEEE CRC-32 check value: the format's checksum must be the standard one.
  const std::string s = "123456789";
  EXPECT_EQ(crc32(std::as_bytes(std::span(s.data(), s.size()))), 0xCBF43926u);
}

TEST(TraceFile, RejectsEveryTruncation) {
  const auto full = encode_trace(sample());
  for (std::size_t n = 0; n < full.size(); ++n) {
    const std::vector<std::byte> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string e = error_of(cut);
    ASSERT_FALSE(e.empty()) << "accepted a file cut to " << n << " bytes";
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_EQ(e.rfind("t.trace: ", 0), 0u) << e;
    if (n >= kTraceHeaderBytes) {
      EXPECT_NE(e.find("truncated"), std::string::npos) << e;
    }
  }
}

TEST(TraceFile, RejectsAFlippedBitAnywhere) {
  const auto full = encode_trace(sample());
  for (std::size_t i = 0; i < full.size(); ++i) {
    auto bad = full;
    bad[i] ^= std::byte{0x10};
    const std::string e = error_of(bad);
    ASSERT_FALSE(e.empty()) << "accepted a flipped bit at byte " << i;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(TraceFile, RejectsWrongVersionWithTheVersionNamed) {
  auto bad = encode_trace(sample());
  put_u32(bad, 8, 7);
  reseal_header(bad);
  EXPECT_EQ(error_of(bad), "t.trace: unsupported trace version 7 (this reader reads version 1)");
}

TEST(TraceFile, RejectsBadMagic) {
  auto bad = encode_trace(sample());
  bad[0] = std::byte{'X'};
  EXPECT_EQ(error_of(bad), "t.trace: not a tierrt trace (bad magic)");
}

TEST(TraceFile, RejectsUnknownKindEvenWithAValidChecksum) {
  auto bad = encode_trace(sample());
  bad[kTraceHeaderBytes + kTraceRecordBytes] = std::byte{42};  // second record's kind
  reseal_body(bad);
  EXPECT_EQ(error_of(bad), "t.trace: corrupt trace: event 1 has unknown kind 42");
}

TEST(TraceFile, RejectsAnAllocWithASubFieldPastLazy) {
  auto bad = encode_trace(sample());
  bad[kTraceHeaderBytes + 1] = std::byte{2};  // the first record's sub-field
  reseal_body(bad);
  EXPECT_EQ(error_of(bad), "t.trace: corrupt trace: event 0 (alloc) has an invalid sub-field 2");
}

TEST(TraceFile, RejectsTrailingGarbage) {
  auto bad = encode_trace(sample());
  bad.push_back(std::byte{0});
  EXPECT_NE(error_of(bad).find("after the trailer"), std::string::npos);
}

TEST(TraceFile, RandomDamageIsRefusedOrReadNeverACrash) {
  // Flipped bytes, cuts and extensions, some with checksums recomputed so that the
  // record checks are reached: the reader either refuses with a TraceError or
  // returns events whose kinds and sub-fields are all valid.
  const auto good = encode_trace(synthesize(test::tiny_options(test::tiny_dense(), 1)));
  std::mt19937_64 rng(7);
  auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    auto bad = good;
    for (std::size_t k = pick(4) + 1; k > 0; --k) bad[pick(bad.size())] ^= static_cast<std::byte>(pick(255) + 1);
    if (pick(4) == 0) bad.resize(pick(bad.size()));
    if (pick(8) == 0) bad.push_back(std::byte{0});
    if (bad.size() >= kTraceHeaderBytes + kTraceTrailerBytes && pick(2) == 0) {
      reseal_header(bad);
      if ((bad.size() - kTraceHeaderBytes - kTraceTrailerBytes) % kTraceRecordBytes == 0) reseal_body(bad);
    }
    try {
      const Trace t = decode_trace(bad, "fuzz");
      for (const Event& e : t) {
        ASSERT_GE(static_cast<int>(e.kind), 1);
        ASSERT_LE(static_cast<int>(e.kind), 9);
      }
    } catch (const TraceError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(TraceFile, MissingFileIsAOneLineError) {
  try {
    read_trace_file("/nonexistent/dir/x.trace");
    FAIL() << "no error";
  } catch (const TraceError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/dir/x.trace: cannot open for reading");
  }
}

}  // namespace
}  // namespace tierrt::policy
