#include "policies/trace/trace_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "crc32.hpp"

namespace tierrt::policy {
namespace {

constexpr char kMagic[8] = {'T', 'I', 'E', 'R', 'R', 'T', 'T', 'R'};
constexpr char kEndMagic[4] = {'T', 'E', 'N', 'D'};

// Explicit little-endian encoding: the file must read the same on any host.
void put_u16(std::byte* p, std::uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
void put_u32(std::byte* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
void put_u64(std::byte* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
std::uint16_t get_u16(const std::byte* p) {
  return static_cast<std::uint16_t>(static_cast<unsigned>(p[0]) | (static_cast<unsigned>(p[1]) << 8));
}
std::uint32_t get_u32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}
std::uint64_t get_u64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

[[noreturn]] void fail(std::string_view name, const std::string& what) {
  throw TraceError(std::string(name) + ": " + what);
}

// The sub field is only meaningful for some kinds; everywhere else it must be zero
// so that a flipped bit cannot hide.
bool sub_is_valid(EventKind kind, std::uint8_t sub) {
  switch (kind) {
    case EventKind::Phase: return sub <= static_cast<std::uint8_t>(Phase::Other);
    case EventKind::CopyRate: return sub <= static_cast<std::uint8_t>(CopyDir::HostToDevice);
    case EventKind::Tag: return sub < kRoleCount;
    case EventKind::Alloc: return sub <= kAllocLazy;
    default: return sub == 0;
  }
}

bool kind_is_valid(std::uint8_t k) {
  return k >= static_cast<std::uint8_t>(EventKind::Alloc) && k <= static_cast<std::uint8_t>(EventKind::Tag);
}

// The header's record count, checked against the size of the whole file: a
// reader allocates nothing the file does not hold.
std::uint64_t checked_count(std::span<const std::byte> header, std::uint64_t file_bytes, std::string_view name) {
  if (header.size() < kTraceHeaderBytes)
    fail(name, "truncated trace: " + std::to_string(file_bytes) + " bytes, shorter than the " +
                   std::to_string(kTraceHeaderBytes) + "-byte header");
  const std::byte* h = header.data();
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0) fail(name, "not a tierrt trace (bad magic)");
  if (get_u32(h + 24) != crc32(header.first(24))) fail(name, "corrupt trace: header checksum mismatch");
  const std::uint32_t version = get_u32(h + 8);
  if (version != kTraceVersion)
    fail(name, "unsupported trace version " + std::to_string(version) + " (this reader reads version " +
                   std::to_string(kTraceVersion) + ")");
  if (get_u32(h + 12) != kTraceRecordBytes || get_u32(h + 28) != 0)
    fail(name, "corrupt trace: bad record size or reserved header field");
  const std::uint64_t count = get_u64(h + 16);
  const std::uint64_t max_count = (file_bytes - kTraceHeaderBytes) / kTraceRecordBytes;
  if (count > max_count || kTraceHeaderBytes + count * kTraceRecordBytes + kTraceTrailerBytes > file_bytes)
    fail(name, "truncated trace: header promises " + std::to_string(count) + " events, file has " +
                   std::to_string(file_bytes) + " bytes");
  const std::uint64_t expected = kTraceHeaderBytes + count * kTraceRecordBytes + kTraceTrailerBytes;
  if (file_bytes != expected)
    fail(name, "corrupt trace: " + std::to_string(file_bytes - expected) + " bytes after the trailer");
  return count;
}

const char* file_type(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Reads exactly `bytes.size()` bytes; false when the file ends first.
bool read_fully(int fd, std::span<std::byte> bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

class OpenFile {
 public:
  explicit OpenFile(int fd) : fd_(fd) {}
  ~OpenFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::vector<std::byte> encode_trace(const Trace& trace) {
  const std::size_t body = trace.size() * kTraceRecordBytes;
  std::vector<std::byte> out(kTraceHeaderBytes + body + kTraceTrailerBytes);
  std::byte* h = out.data();
  std::memcpy(h, kMagic, sizeof kMagic);
  put_u32(h + 8, kTraceVersion);
  put_u32(h + 12, static_cast<std::uint32_t>(kTraceRecordBytes));
  put_u64(h + 16, trace.size());
  put_u32(h + 24, crc32(std::span(out.data(), 24)));
  put_u32(h + 28, 0);
  std::byte* r = out.data() + kTraceHeaderBytes;
  for (const Event& e : trace) {
    r[0] = static_cast<std::byte>(e.kind);
    r[1] = static_cast<std::byte>(e.sub);
    put_u16(r + 2, 0);
    put_u32(r + 4, e.stream);
    put_u64(r + 8, e.a);
    put_u64(r + 16, e.b);
    r += kTraceRecordBytes;
  }
  put_u32(r, crc32(std::span(out.data() + kTraceHeaderBytes, body)));
  std::memcpy(r + 4, kEndMagic, sizeof kEndMagic);
  return out;
}

Trace decode_trace(std::span<const std::byte> bytes, std::string_view name) {
  const std::uint64_t count = checked_count(bytes.first(std::min(bytes.size(), kTraceHeaderBytes)), bytes.size(), name);
  const std::byte* h = bytes.data();
  const std::size_t body = static_cast<std::size_t>(count) * kTraceRecordBytes;
  const std::byte* t = h + kTraceHeaderBytes + body;
  if (std::memcmp(t + 4, kEndMagic, sizeof kEndMagic) != 0) fail(name, "corrupt trace: bad trailer");
  const std::uint32_t stored = get_u32(t);
  const std::uint32_t computed = crc32(bytes.subspan(kTraceHeaderBytes, body));
  if (stored != computed) fail(name, "corrupt trace: event checksum mismatch");

  Trace trace;
  trace.reserve(static_cast<std::size_t>(count));
  const std::byte* r = h + kTraceHeaderBytes;
  for (std::uint64_t i = 0; i < count; ++i, r += kTraceRecordBytes) {
    const auto kind = static_cast<std::uint8_t>(r[0]);
    const auto sub = static_cast<std::uint8_t>(r[1]);
    if (!kind_is_valid(kind))
      fail(name, "corrupt trace: event " + std::to_string(i) + " has unknown kind " + std::to_string(kind));
    if (!sub_is_valid(static_cast<EventKind>(kind), sub) || get_u16(r + 2) != 0)
      fail(name, "corrupt trace: event " + std::to_string(i) + " (" + to_string(static_cast<EventKind>(kind)) +
                     ") has an invalid sub-field " + std::to_string(sub));
    trace.push_back(Event{static_cast<EventKind>(kind), sub, get_u32(r + 4), get_u64(r + 8), get_u64(r + 16)});
  }
  check_trace_contents(trace, name);
  return trace;
}

void write_trace_file(const std::string& path, const Trace& trace) {
  const auto bytes = encode_trace(trace);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw TraceError(path + ": cannot open for writing");
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw TraceError(path + ": write failed");
}

Trace read_trace_file(const std::string& path) {
  // Non-blocking, so that opening a FIFO with no writer returns at once.
  const OpenFile file(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (file.fd() < 0) throw TraceError(path + ": cannot open for reading");
  struct stat st {};
  if (::fstat(file.fd(), &st) != 0) throw TraceError(path + ": cannot open for reading");
  if (!S_ISREG(st.st_mode)) fail(path, std::string("not a trace file: ") + file_type(st.st_mode));
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  std::byte header[kTraceHeaderBytes];
  const std::size_t header_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(file_bytes, kTraceHeaderBytes));
  if (!read_fully(file.fd(), std::span(header, header_bytes))) throw TraceError(path + ": read failed");
  checked_count(std::span(header, header_bytes), file_bytes, path);
  std::vector<std::byte> raw(static_cast<std::size_t>(file_bytes));
  std::memcpy(raw.data(), header, kTraceHeaderBytes);
  if (!read_fully(file.fd(), std::span(raw).subspan(kTraceHeaderBytes)))
    throw TraceError(path + ": read failed (the file shrank while it was read)");
  return decode_trace(raw, path);
}

}  // namespace tierrt::policy
