#include "runtime/settings.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "allocator/budget_defaults.h"
#include "cgroup_memory.h"
#include "log.h"
#include "runtime/rank.h"

namespace tierrt {

namespace {

const char* value_of(config::GetenvFn getenv_fn, const char* name) {
  const char* v = getenv_fn(name);
  return v && *v ? v : nullptr;
}

bool parse_flag(const char* variable, const char* value, bool* out, std::string* error) {
  auto k = config::parse_choice(variable, value, {"0", "1", "off", "on", "false", "true", "no", "yes"}, error);
  if (!k) return false;
  *out = *k % 2 == 1;
  return true;
}

// Where a report goes: "" (off) for "0"/"off", "-" (stderr) for "1"/"-",
// else a file. A new string, not a literal assigned to one: GCC 12 at -O3
// reports a false -Wrestrict on `str = "-"` (GCC bug 105329).
std::string output_destination(std::string_view v) {
  for (std::string_view off : {"0", "off", "false", "no"})
    if (v == off) return {};
  for (std::string_view err : {"1", "on", "true", "yes", "-", "stderr"})
    if (v == err) return std::string("-");
  return std::string(v);
}

// A budget: a size or a percentage, above zero (zero would leave tierrt no
// memory at all; TIERRT_MODE=off is the way to turn it off).
std::optional<config::ByteSize> parse_budget(const char* variable, const char* value, std::string* error) {
  auto b = config::parse_byte_size(variable, value, true, error);
  if (b && !b->relative && b->bytes == 0) {
    if (error != nullptr)
      *error = config::refusal(variable, value, "a size above zero or a percentage (TIERRT_MODE=off turns tierrt off)");
    return std::nullopt;
  }
  return b;
}

// A whole number of microseconds up to one second: a longer window would let
// a wait on a lazy use include that much of the stream's later work.
bool parse_window_us(const char* value, std::uint64_t* out, std::string* error) {
  const std::string_view v(value);
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n > 1'000'000) {
    if (error != nullptr)
      *error = config::refusal("TIERRT_USE_EVENT_WINDOW_US", v,
                               "a whole number of microseconds from 0 (every launch records its own event) to 1000000");
    return false;
  }
  *out = n;
  return true;
}

// Two outputs written to one file lose one of them: refused, naming both.
bool outputs_apart(const Settings& s, std::string* error) {
  namespace fs = std::filesystem;
  const std::pair<const char*, const std::string*> outputs[] = {
      {"TIERRT_STATS", &s.stats}, {"TIERRT_TRACE", &s.trace}, {"TIERRT_RECORD", &s.record},
      {"TIERRT_LOG_FILE", &s.log_file}, {"TIERRT_PLOT", &s.plot}};
  for (std::size_t i = 0; i < std::size(outputs); ++i) {
    for (std::size_t j = i + 1; j < std::size(outputs); ++j) {
      const std::string& a = *outputs[i].second;
      const std::string& b = *outputs[j].second;
      if (a.empty() || b.empty() || a == "-" || b == "-") continue;
      std::error_code ec;
      if (a != b && fs::absolute(a, ec).lexically_normal() != fs::absolute(b, ec).lexically_normal()) continue;
      if (error != nullptr)
        *error = std::string("tierrt: ") + outputs[i].first + " and " + outputs[j].first + " both name \"" +
                 config::printable(a) + "\"; each output needs a file of its own";
      return false;
    }
  }
  return true;
}

// A ledger key goes into a shared-memory object's name: letters, digits,
// '.', '_' and '-' only.
bool parse_node_key(const char* value, std::string* out, std::string* error) {
  const std::string_view v(value);
  const bool ok = v.size() <= 64 && v.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                         "0123456789._-") == std::string_view::npos;
  if (!ok) {
    if (error != nullptr)
      *error = config::refusal("TIERRT_NODE_KEY", value, "up to 64 letters, digits, '.', '_' or '-'");
    return false;
  }
  *out = std::string(v);
  return true;
}

bool parse_link(const char* value, policy::LinkModel* out, std::string* error) {
  try {
    *out = policy::parse_link(config::normalized(value));
    return true;
  } catch (const std::invalid_argument&) {
    if (error != nullptr)
      *error = config::refusal("TIERRT_LINK", value,
                               "pcie5, c2c, or H2D,D2H in GB/s (host-to-device, device-to-host, e.g. 100,80)");
    return false;
  }
}

// Half of RAM, and within a cgroup limit at most half of the limit shared
// by the node's ranks (each rank is likely in the same cgroup).
std::uint64_t default_host_budget(const MachineFacts& m) noexcept {
  std::uint64_t b = alloc::default_host_budget(m.physical_ram);
  if (m.cgroup_limit != 0) {
    const std::uint64_t share = m.cgroup_limit / 2 / static_cast<std::uint64_t>(std::max(1, m.local_ranks));
    b = b == 0 ? share : std::min(b, share);
  }
  return b;
}

}  // namespace

MachineFacts this_machine(std::uint64_t device_total) {
  MachineFacts m;
  m.device_total = device_total;
  m.physical_ram = alloc::physical_ram();
  m.cgroup_limit = cgroup_memory_limit();
  m.local_ranks = config::read_rank().local_ranks;
  return m;
}

bool read_settings(Settings* out, std::string* error, config::GetenvFn getenv_fn) {
  if (!getenv_fn) getenv_fn = [](const char* n) -> const char* { return std::getenv(n); };
  Settings s;
  if (const char* v = value_of(getenv_fn, "TIERRT_MODE")) {
    auto k = config::parse_choice("TIERRT_MODE", v, {"off", "observe", "tier"}, error);
    if (!k) return false;
    s.mode = static_cast<Mode>(*k);
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_DEVICE_BUDGET")) {
    s.device_budget = parse_budget("TIERRT_DEVICE_BUDGET", v, error);
    if (!s.device_budget) return false;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_HOST_BUDGET")) {
    s.host_budget = parse_budget("TIERRT_HOST_BUDGET", v, error);
    if (!s.host_budget) return false;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_MIN_BYTES")) {
    auto b = config::parse_byte_size("TIERRT_MIN_BYTES", v, false, error);
    if (!b) return false;
    s.min_bytes = b->bytes;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_POINTER_SCAN_BYTES")) {
    auto b = config::parse_byte_size("TIERRT_POINTER_SCAN_BYTES", v, false, error);
    if (!b) return false;
    s.pointer_scan_bytes = b->bytes;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_GRANULE_BYTES")) {
    auto b = config::parse_byte_size("TIERRT_GRANULE_BYTES", v, false, error);
    if (!b) return false;
    s.granule_bytes = b->bytes;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_GRANULE_UNIT")) {
    auto b = config::parse_byte_size("TIERRT_GRANULE_UNIT", v, false, error);
    if (!b) return false;
    if (b->bytes == 0) {
      if (error != nullptr) *error = config::refusal("TIERRT_GRANULE_UNIT", v, "a size above zero");
      return false;
    }
    s.granule_unit = b->bytes;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_GRANULE_EXTENT")) {
    auto b = config::parse_byte_size("TIERRT_GRANULE_EXTENT", v, false, error);
    if (!b) return false;
    s.granule_extent = b->bytes;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_USE_EVENT_WINDOW_US")) {
    if (!parse_window_us(v, &s.use_event_window_us, error)) return false;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_SPILL_MODE")) {
    auto k = config::parse_choice("TIERRT_SPILL_MODE", v, {"auto", "remap", "copy"}, error);
    if (!k) return false;
    constexpr alloc::SpillMode kModes[] = {alloc::SpillMode::Auto, alloc::SpillMode::Remap, alloc::SpillMode::Copy};
    s.spill_mode = kModes[*k];
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_POLICY")) {
    auto k = config::parse_choice("TIERRT_POLICY", v, {"planner", "reactive"}, error);
    if (!k) return false;
    s.policy = *k == 0 ? Policy::Planner : Policy::Reactive;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_LINK")) {
    if (!parse_link(v, &s.link, error)) return false;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_VIRTUAL_MEMINFO")) {
    if (!parse_flag("TIERRT_VIRTUAL_MEMINFO", v, &s.virtual_meminfo, error)) return false;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_STATS")) s.stats = output_destination(v);
  if (const char* v = value_of(getenv_fn, "TIERRT_TRACE")) s.trace = output_destination(v);
  if (const char* v = value_of(getenv_fn, "TIERRT_RECORD")) s.record = output_destination(v);
  if (const char* v = value_of(getenv_fn, "TIERRT_PLOT")) {
    s.plot = output_destination(v);
    if (s.plot == "-") {  // an SVG on stderr would mix with the job's own output
      if (error != nullptr) *error = config::refusal("TIERRT_PLOT", v, "a file name for the SVG, or 0 (off)");
      return false;
    }
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_LOG")) {
    auto k = config::parse_choice("TIERRT_LOG", v, {"off", "error", "warn", "info", "debug"}, error);
    if (!k) return false;
    s.log_level = static_cast<LogLevel>(*k);
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_LOG_FILE")) s.log_file = v;
  if (const char* v = value_of(getenv_fn, "TIERRT_NODE_HOST_BUDGET")) {
    auto b = config::parse_byte_size("TIERRT_NODE_HOST_BUDGET", v, false, error);
    if (!b) return false;
    if (b->bytes == 0) {
      if (error != nullptr)
        *error = config::refusal("TIERRT_NODE_HOST_BUDGET", v, "a size above zero (unset: no node budget)");
      return false;
    }
    s.node_host_budget = b->bytes;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_NODE_KEY")) {
    if (!parse_node_key(v, &s.node_key, error)) return false;
  }
  if (!outputs_apart(s, error)) return false;
  *out = std::move(s);
  return true;
}

ResolvedSettings resolve(const Settings& s, const MachineFacts& machine) noexcept {
  ResolvedSettings r;
  r.device_budget = s.device_budget ? s.device_budget->resolve(machine.device_total)
                                    : alloc::default_device_budget(machine.device_total);
  if (machine.device_total != 0 && r.device_budget > machine.device_total) {
    // Counting against memory the device does not have would let the stats
    // report a peak above the device, and never spill before the driver fails.
    TIERRT_LOG(Warn, "TIERRT_DEVICE_BUDGET (%llu MiB) is more than the device's memory (%llu MiB); using %llu MiB",
               static_cast<unsigned long long>(r.device_budget >> 20),
               static_cast<unsigned long long>(machine.device_total >> 20),
               static_cast<unsigned long long>(machine.device_total >> 20));
    r.device_budget = machine.device_total;
  }
  r.host_budget = s.host_budget ? s.host_budget->resolve(machine.physical_ram) : default_host_budget(machine);
  r.min_bytes = s.min_bytes;
  r.spill_mode = s.spill_mode;
  r.granule_bytes = s.granule_bytes;
  r.granule_unit = s.granule_unit;
  r.use_event_window_ns = s.use_event_window_us * 1000;
  if (s.mode == Mode::Observe) r.host_budget = 1;
  return r;
}

}  // namespace tierrt
