// tierrt-replay against files a user should never have to worry about: things
// that are not regular files, a header that promises more than the file holds,
// and well-formed traces whose events cannot have happened. Each is refused at
// once with one line naming the file (and the record) and a non-zero status.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "policies/trace/trace_file.hpp"

namespace {

using tierrt::policy::Event;
using tierrt::policy::Trace;

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr together
};

std::string tool() {
  const char* p = std::getenv("TIERRT_REPLAY");
  return p ? p : "";
}

// Bounded: a run that never ends shows up as status 124.
Result run(const std::string& args) {
  Result r;
  FILE* f = ::popen(("timeout 20 " + tool() + " " + args + " 2>&1").c_str(), "r");
  if (!f) return r;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), f)) r.out += buf.data();
  const int st = ::pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

Result replay(const std::string& path) { return run("replay --trace '" + path + "'"); }

class ReplayHostileFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    if (tool().empty()) GTEST_SKIP() << "TIERRT_REPLAY not set";
    dir_ = std::filesystem::temp_directory_path() / ("tierrt-replay-hostile-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Writes `t` (a valid encoding of whatever events it holds) and expects the
  // tool to refuse it with exactly `message` after the path.
  void expect_refused(const char* file, const Trace& t, const std::string& message) {
    const std::string path = (dir_ / file).string();
    tierrt::policy::write_trace_file(path, t);
    expect_refused_path(path, message);
  }
  void expect_refused_path(const std::string& path, const std::string& message) {
    const Result r = replay(path);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_EQ(r.out, "tierrt-replay: " + path + ": " + message + "\n");
  }

  std::filesystem::path dir_;
};

TEST_F(ReplayHostileFiles, DirectoryIsRefused) {
  expect_refused_path(dir_.string(), "not a trace file: a directory");
}

TEST_F(ReplayHostileFiles, EndlessDeviceIsRefusedAtOnce) {
  expect_refused_path("/dev/zero", "not a trace file: a character device");
}

TEST_F(ReplayHostileFiles, FifoWithNoWriterIsRefusedAtOnce) {
  const std::string path = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  expect_refused_path(path, "not a trace file: a FIFO");
}

TEST_F(ReplayHostileFiles, HeaderPromisingMoreThanTheFileHoldsIsRefused) {
  auto bytes = tierrt::policy::encode_trace({Event::alloc(1, 4096)});
  bytes.resize(tierrt::policy::kTraceHeaderBytes + 10);
  const std::string path = (dir_ / "short.trace").string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  expect_refused_path(path, "truncated trace: header promises 1 events, file has 42 bytes");
}

TEST_F(ReplayHostileFiles, UseOfAnUnknownBlockIsRefused) {
  expect_refused("unknown.trace", {Event::alloc(0x10, 4096), Event::launch(0, 100), Event::use(0x20, 0)},
                 "invalid trace: record 2 (offset 80): use of unknown block 0x20 (not allocated, or freed)");
}

TEST_F(ReplayHostileFiles, TagOfAnUnknownBlockIsRefused) {
  expect_refused("tag.trace", {Event::alloc(0x10, 4096), Event::tag(0x11, tierrt::policy::Role::Query, 0)},
                 "invalid trace: record 1 (offset 56): tag of unknown block 0x11 (not allocated, or freed)");
}

TEST_F(ReplayHostileFiles, UseBeforeAllocationIsRefused) {
  expect_refused("early.trace", {Event::launch(0, 100), Event::use(0x10, 0), Event::alloc(0x10, 4096)},
                 "invalid trace: record 1 (offset 56): use of unknown block 0x10 (not allocated, or freed)");
}

TEST_F(ReplayHostileFiles, UseAfterFreeIsRefused) {
  expect_refused("late.trace",
                 {Event::alloc(0x10, 4096), Event::free(0x10), Event::launch(3, 100), Event::use(0x10, 3)},
                 "invalid trace: record 3 (offset 104): use of unknown block 0x10 (not allocated, or freed)");
}

TEST_F(ReplayHostileFiles, UseNamingAnotherLaunchIsRefused) {
  expect_refused("stray.trace", {Event::alloc(0x10, 4096), Event::launch(4, 100), Event::use(0x10, 9)},
                 "invalid trace: record 2 (offset 80): use of block 0x10 by launch 9, which is not the launch "
                 "before it");
}

TEST_F(ReplayHostileFiles, DuplicateAllocationIsRefused) {
  expect_refused("dup.trace", {Event::alloc(0x10, 4096), Event::alloc(0x10, 8192)},
                 "invalid trace: record 1 (offset 56): duplicate allocation of live block 0x10");
}

TEST_F(ReplayHostileFiles, DecreasingLaunchNumbersAreRefused) {
  expect_refused("down.trace", {Event::launch(7, 100), Event::launch(5, 100)},
                 "invalid trace: record 1 (offset 56): launch number 5 after launch 7 (launch numbers must "
                 "increase)");
}

TEST_F(ReplayHostileFiles, RepeatedLaunchNumberIsRefused) {
  expect_refused("again.trace", {Event::launch(7, 100), Event::launch(7, 100)},
                 "invalid trace: record 1 (offset 56): launch number 7 after launch 7 (launch numbers must "
                 "increase)");
}

TEST_F(ReplayHostileFiles, SizeBeyond2To48IsRefused) {
  expect_refused("huge.trace", {Event::alloc(0x10, (1ull << 48) + 1)},
                 "invalid trace: record 0 (offset 32): allocation of block 0x10 with size 281474976710657 "
                 "(sizes are 1 to 2^48 bytes)");
}

TEST_F(ReplayHostileFiles, Size2To64IsRefused) {
  expect_refused("max.trace", {Event::alloc(0x10, ~0ull)},
                 "invalid trace: record 0 (offset 32): allocation of block 0x10 with size 18446744073709551615 "
                 "(sizes are 1 to 2^48 bytes)");
}

TEST_F(ReplayHostileFiles, LaunchLasting2To64NanosecondsIsRefused) {
  // Accepted, this printed "18446744073709.6 ms per step".
  expect_refused("forever.trace", {Event::alloc(0x10, 4096), Event::launch(0, ~0ull), Event::use(0x10, 0)},
                 "invalid trace: record 1 (offset 56): launch 0 lasting 18446744073709551615 ns (at most 2^48 ns)");
}

TEST_F(ReplayHostileFiles, ZeroCopyRateIsRefused) {
  expect_refused("stalled.trace", {Event::copy_rate(tierrt::policy::CopyDir::DeviceToHost, 0)},
                 "invalid trace: record 0 (offset 32): copy rate of 0 bytes/s (rates are 1 to 2^48 bytes/s)");
}

TEST_F(ReplayHostileFiles, FreeOfAnUnknownBlockIsRefused) {
  expect_refused("free.trace", {Event::alloc(0x10, 4096), Event::free(0x10), Event::free(0x10)},
                 "invalid trace: record 2 (offset 80): free of unknown block 0x10");
}

// Not a file, but the same kind of input: a link rate whose moves take no time
// or forever used to make the step model run without end.
TEST_F(ReplayHostileFiles, ExtremeLinkRatesAreRefusedNotAHang) {
  for (const char* link : {"1e300,80", "100,1e-300", "0.0001,80", "100,2000000"}) {
    const Result r = run(std::string("replay --model llama3.1-8b --seq 1024 --steps 2 --link ") + link);
    EXPECT_EQ(r.status, 2) << link << ": " << r.out;
    EXPECT_EQ(r.out, std::string("tierrt-replay: --link: bad link '") + link +
                         "': expected pcie5, c2c or H2D,D2H in GB/s, each from 0.001 to 1000000 (e.g. 100,80)\n");
  }
}

// A newline in what the user typed is written escaped: the error stays one line.
TEST_F(ReplayHostileFiles, ControlCharactersInArgumentsAndPathsAreEscaped) {
  Result r = run("replay --model \"$(printf 'gpt\\n9')\"");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_EQ(r.out, "tierrt-replay: unknown model 'gpt\\x0a9': expected llama3.1-8b, llama3.1-70b, llama3.1-405b or "
                   "deepseek-v3\n");
  r = run("replay --trace \"$(printf 'no\\tsuch\\nfile')\"");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out, "tierrt-replay: no\\x09such\\x0afile: cannot open for reading\n");
}

}  // namespace
