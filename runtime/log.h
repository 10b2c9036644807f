// tierrt's log: one line per message, "tierrt: " first, to stderr or
// TIERRT_LOG_FILE. Formats into a fixed buffer (no allocation); still, never
// call it on a launch or lookup path.
#pragma once

#include "runtime/settings.h"

namespace tierrt::log {

void configure(LogLevel level, const char* file);  // file: null or "" for stderr
bool enabled(LogLevel level);
void write(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace tierrt::log

#define TIERRT_LOG(level, ...)                                                  \
  do {                                                                          \
    if (::tierrt::log::enabled(::tierrt::LogLevel::level)) ::tierrt::log::write(::tierrt::LogLevel::level, __VA_ARGS__); \
  } while (0)
