#include "log.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>

#include "runtime/config.h"
#include "runtime/rank.h"

namespace tierrt::log {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::Warn)};
std::atomic<int> g_fd{2};
// The rank and local rank shown in the prefix; -1 when not known.
std::atomic<int> g_rank{-1};
std::atomic<int> g_local_rank{-1};
constexpr const char* kNames[] = {"", "error", "warn", "info", "debug"};
}  // namespace

void configure(LogLevel level, const char* file) {
  g_level.store(static_cast<int>(level));
  const config::RankInfo rank = config::read_rank();
  g_rank.store(rank.rank);
  g_local_rank.store(rank.local_rank);
  if (file && *file) {
    int fd = open(config::expand_output_path(file).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) g_fd.store(fd);
    else write(LogLevel::Error, "cannot open TIERRT_LOG_FILE=\"%s\"; logging to stderr", file);
  }
  if (!rank.warning.empty() && enabled(LogLevel::Warn)) write(LogLevel::Warn, "%s", rank.warning.c_str());
}

bool enabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed); }

void write(LogLevel level, const char* fmt, ...) {
  char buf[1024];
  const int rank = g_rank.load(std::memory_order_relaxed), local = g_local_rank.load(std::memory_order_relaxed);
  char who[32] = "";
  if (rank >= 0 && local >= 0) std::snprintf(who, sizeof who, " r%d/l%d", rank, local);
  else if (rank >= 0) std::snprintf(who, sizeof who, " r%d", rank);
  else if (local >= 0) std::snprintf(who, sizeof who, " l%d", local);
  int n = std::snprintf(buf, sizeof buf, "tierrt[%d%s] %s: ", static_cast<int>(getpid()), who,
                        kNames[static_cast<int>(level)]);
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : std::min<size_t>(static_cast<size_t>(m), sizeof buf - n - 2));
  buf[len++] = '\n';
  // One write() per line, so lines from threads and processes don't interleave.
  ssize_t ignored = ::write(g_fd.load(), buf, len);
  (void)ignored;
}

}  // namespace tierrt::log
