// tierrt's log: one line per message, "tierrt[PID] level: " first
// ("tierrt[PID r3/l1] ..." when the launcher tells the rank and local rank,
// runtime/rank.h), to stderr or TIERRT_LOG_FILE. Formats into a fixed buffer (no allocation); still, never
// call it on a launch or lookup path.
#pragma once

#include "runtime/settings.h"

namespace tierrt::log {

// file: null or "" for stderr. Reads the rank for the prefix, and says once
// which rank variables were malformed.
void configure(LogLevel level, const char* file);
bool enabled(LogLevel level);
void write(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace tierrt::log

#define TIERRT_LOG(level, ...)                                                  \
  do {                                                                          \
    if (::tierrt::log::enabled(::tierrt::LogLevel::level)) ::tierrt::log::write(::tierrt::LogLevel::level, __VA_ARGS__); \
  } while (0)
