// Every TIERRT_* variable, read in one place, and every default resolved in
// one place. A bad value yields one line (variable, value, what is accepted)
// and tierrt runs the process with tiering off; the job itself still runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "allocator/spill_mode.h"
#include "policies/link_model.hpp"
#include "runtime/config.h"

namespace tierrt {

enum class Mode { Off, Observe, Tier };
enum class LogLevel { Off, Error, Warn, Info, Debug };

// What decides spills: the planner learns the step and plans ahead; reactive
// spills the coldest idle blocks when over budget and fetches on demand.
enum class Policy : std::uint8_t { Planner, Reactive };

struct Settings {
  Mode mode = Mode::Tier;                               // TIERRT_MODE: off | observe | tier
  std::optional<config::ByteSize> device_budget;         // TIERRT_DEVICE_BUDGET (bytes or % of the device)
  std::optional<config::ByteSize> host_budget;           // TIERRT_HOST_BUDGET (bytes or % of RAM)
  std::uint64_t min_bytes = 1ull << 20;                  // TIERRT_MIN_BYTES (bytes)
  alloc::SpillMode spill_mode = alloc::SpillMode::Auto;  // TIERRT_SPILL_MODE: auto | remap | copy
  Policy policy = Policy::Planner;                       // TIERRT_POLICY: planner | reactive
  tierrt::policy::LinkModel link = tierrt::policy::parse_link("pcie5");  // TIERRT_LINK
  bool virtual_meminfo = false;                          // TIERRT_VIRTUAL_MEMINFO: 0 | 1
  // Outputs: "" off ("0", "off"), "-" stderr ("-", "1", "stderr"), else a
  // file name in which %p and %r are expanded when it is opened
  // (config::expand_output_path). No two outputs may name one file.
  std::string stats;                                     // TIERRT_STATS: the summary at exit
  std::string trace;                                     // TIERRT_TRACE: Chrome trace JSON
  std::string record;                                    // TIERRT_RECORD: event stream (trace format)
  std::string plot;                                      // TIERRT_PLOT: SVG memory timeline (a file only)
  LogLevel log_level = LogLevel::Warn;                  // TIERRT_LOG
  std::string log_file;                                  // TIERRT_LOG_FILE ("" is stderr)
  std::uint64_t pointer_scan_bytes = 64ull << 10;        // TIERRT_POINTER_SCAN_BYTES (bytes; 0: no scan)
  // The host memory all ranks of the node pin together (runtime/node_ledger.h);
  // 0: each rank has only its own host budget.
  std::uint64_t node_host_budget = 0;                    // TIERRT_NODE_HOST_BUDGET (bytes)
  // Which ledger: ranks with one key share one; "" takes the job's id and
  // the node budget (node_ledger_name).
  std::string node_key;                                  // TIERRT_NODE_KEY: [A-Za-z0-9._-], at most 64
  // Granule groups (remap mode): an allocation of at least granule_bytes is
  // tiered per granule_unit; a launch naming an address inside one makes
  // resident at most granule_extent bytes from there (0: no cap).
  std::uint64_t granule_bytes = 0;                       // TIERRT_GRANULE_BYTES (bytes; 0: off)
  std::uint64_t granule_unit = 4ull << 20;               // TIERRT_GRANULE_UNIT (bytes, above zero)
  std::uint64_t granule_extent = 32ull << 20;            // TIERRT_GRANULE_EXTENT (bytes; 0: no cap)
  // How long a stream's launches may share one use event before one records
  // it (allocator/use_tracker.h, lazy use events); 0: every launch records
  // its own, as before lazy events.
  std::uint64_t use_event_window_us = 20;                // TIERRT_USE_EVENT_WINDOW_US (0 .. 1000000)
};

// The names of every variable Settings reads, for documentation and checks.
inline constexpr const char* kSettingVariables[] = {
    "TIERRT_MODE",   "TIERRT_DEVICE_BUDGET", "TIERRT_HOST_BUDGET", "TIERRT_MIN_BYTES",
    "TIERRT_SPILL_MODE", "TIERRT_POLICY",    "TIERRT_LINK",        "TIERRT_VIRTUAL_MEMINFO",
    "TIERRT_STATS",  "TIERRT_TRACE",         "TIERRT_RECORD",      "TIERRT_LOG",
    "TIERRT_LOG_FILE",
    "TIERRT_POINTER_SCAN_BYTES",
    "TIERRT_PLOT",
    "TIERRT_NODE_HOST_BUDGET", "TIERRT_NODE_KEY",
    "TIERRT_GRANULE_BYTES", "TIERRT_GRANULE_UNIT", "TIERRT_GRANULE_EXTENT",
    "TIERRT_USE_EVENT_WINDOW_US",
};

// Reads the environment through getenv_fn (std::getenv when null). Returns
// false and sets *error (one line) on the first bad value.
bool read_settings(Settings* out, std::string* error, config::GetenvFn getenv_fn = nullptr);

// What the settings are resolved against: facts about the machine.
struct MachineFacts {
  std::uint64_t device_total = 0;  // bytes of memory on the device
  std::uint64_t physical_ram = 0;  // bytes of host RAM
  std::uint64_t cgroup_limit = 0;  // bytes the process's cgroup may use; 0: no limit
  int local_ranks = 0;             // ranks of the job on this node; 0: not known
};

// This machine's facts: physical RAM, the cgroup's memory limit
// (runtime/cgroup_memory.h) and the local ranks the launcher announces.
MachineFacts this_machine(std::uint64_t device_total);

// The concrete values the engine hands to the allocator.
struct ResolvedSettings {
  std::uint64_t device_budget = 0;  // bytes
  std::uint64_t host_budget = 0;    // bytes
  std::uint64_t min_bytes = 0;      // bytes
  alloc::SpillMode spill_mode = alloc::SpillMode::Auto;
  std::uint64_t granule_bytes = 0;  // 0: no granule groups
  std::uint64_t granule_unit = 0;   // bytes
  std::uint64_t use_event_window_ns = 0;
};

// Budgets from percentages and defaults: the device budget defaults to the
// device's memory less a reserve (1/16 of it, at most 512 MiB), the host
// budget to half of physical RAM, and under a cgroup memory limit to at most
// half of that limit shared by the node's ranks (the limit / 2 / local ranks):
// pinned host memory counts against the cgroup, and the job needs the rest. A device budget above the device's memory
// (when known) is clamped to it, with a warning. In observe mode the host budget is one
// byte: every spill is refused as "host full", the allocator's own stop
// signal, so blocks are tracked and counted but never moved.
ResolvedSettings resolve(const Settings& s, const MachineFacts& machine) noexcept;

}  // namespace tierrt
