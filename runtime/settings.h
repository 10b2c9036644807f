// Every TIERRT_* variable, read in one place. A bad value yields one line
// (variable, value, what is accepted) and tierrt runs the process with
// tiering off; the job itself still runs.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/config.h"

namespace tierrt {

enum class Mode { kOff, kObserve, kTier };
enum class LogLevel { kOff, kError, kWarn, kInfo, kDebug };

struct Settings {
  Mode mode = Mode::kTier;                   // TIERRT_MODE: off | observe | tier
  config::AllocatorConfig allocator;         // TIERRT_DEVICE_BUDGET, _HOST_BUDGET, _MIN_BYTES, _SPILL_MODE
  std::string policy = "planner";            // TIERRT_POLICY
  bool virtual_meminfo = false;              // TIERRT_VIRTUAL_MEMINFO: 0 | 1
  std::string stats;                         // TIERRT_STATS: "" off, "-" stderr, else a file
  std::string trace;                         // TIERRT_TRACE: Chrome trace JSON file
  std::string record;                        // TIERRT_RECORD: event-stream file (trace format)
  LogLevel log_level = LogLevel::kWarn;      // TIERRT_LOG
  std::string log_file;                      // TIERRT_LOG_FILE ("" is stderr)
};

// The names of every variable Settings reads, for documentation and checks.
inline constexpr const char* kSettingVariables[] = {
    "TIERRT_MODE",   "TIERRT_DEVICE_BUDGET", "TIERRT_HOST_BUDGET", "TIERRT_MIN_BYTES",
    "TIERRT_SPILL_MODE", "TIERRT_POLICY",    "TIERRT_VIRTUAL_MEMINFO",
    "TIERRT_STATS",  "TIERRT_TRACE",         "TIERRT_RECORD",      "TIERRT_LOG",
    "TIERRT_LOG_FILE",
};

// Reads the environment through getenv_fn (std::getenv when null). Returns
// false and sets *error (one line) on the first bad value.
bool read_settings(Settings* out, std::string* error, config::GetenvFn getenv_fn = nullptr);

}  // namespace tierrt
