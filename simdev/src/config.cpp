#include "config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common.h"

namespace simdev {

namespace {

struct Unit {
  const char* suffix;
  double scale;
};

constexpr Unit kUnits[] = {
    {"TiB", 1099511627776.0}, {"GiB", 1073741824.0}, {"MiB", 1048576.0},
    {"KiB", 1024.0},          {"TB", 1e12},          {"GB", 1e9},
    {"MB", 1e6},              {"KB", 1e3},           {"B", 1.0},
    {"", 1.0},
};

std::optional<double> parse_positive_double(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(v) || v < 0)
    return std::nullopt;
  return v;
}

std::optional<int> parse_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < -1000000 || v > 1000000000) return std::nullopt;
  return static_cast<int>(v);
}

uint64_t physical_ram() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : uint64_t{8} << 30;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

void note_error(Config& cfg, const char* var, const char* value, const char* accepted) {
  if (!cfg.error.empty()) return;
  cfg.error = std::string("simdev: ") + var + "=\"" + value + "\" is not valid; expected " + accepted;
}

// "145:0,141:invalid" -> attribute 145 answers 0, 141 answers INVALID_VALUE.
bool parse_attributes(const std::string& spec, std::map<int, AttributeOverride>& out) {
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos) return false;
    auto id = parse_int(item.substr(0, colon));
    std::string what = item.substr(colon + 1);
    if (!id || *id < 0) return false;
    AttributeOverride o;
    if (what == "invalid") {
      o.error = CUDA_ERROR_INVALID_VALUE;
    } else if (auto v = parse_int(what)) {
      o.value = *v;
    } else {
      return false;
    }
    out[*id] = o;
  }
  return true;
}

}  // namespace

std::optional<uint64_t> parse_bytes(const std::string& text) {
  for (const Unit& u : kUnits) {
    size_t n = std::strlen(u.suffix);
    if (text.size() < n || text.compare(text.size() - n, n, u.suffix) != 0) continue;
    auto v = parse_positive_double(text.substr(0, text.size() - n));
    if (!v) return std::nullopt;
    double bytes = *v * u.scale;
    if (bytes < 1 || bytes > 1.8e19) return std::nullopt;
    return static_cast<uint64_t>(bytes);
  }
  return std::nullopt;
}

Config load_config_from_env() {
  Config cfg;
  if (const char* v = env("SIMDEV_MEM")) {
    auto b = parse_bytes(v);
    if (b && *b >= kGranularity) cfg.device_bytes = round_up(*b, kGranularity);
    else note_error(cfg, "SIMDEV_MEM", v, "a size of at least 2MiB such as 4GiB, 256MiB or 1073741824");
  }
  cfg.host_bytes = physical_ram();
  if (const char* v = env("SIMDEV_HOST_MEM")) {
    auto b = parse_bytes(v);
    if (b && *b >= kGranularity) cfg.host_bytes = *b;
    else note_error(cfg, "SIMDEV_HOST_MEM", v, "a size of at least 2MiB such as 16GiB");
  }
  // Physical memory kept resident (phys_pool.h): 1 GiB, or an eighth of
  // the machine's memory where that is less.
  cfg.resident_bytes = std::min(uint64_t{1} << 30, physical_ram() / 8);
  if (const char* v = env("SIMDEV_RESIDENT")) {
    std::string t = v;
    auto b = parse_bytes(v);
    if (t == "0") cfg.resident_bytes = 0;
    else if (b) cfg.resident_bytes = *b;
    else note_error(cfg, "SIMDEV_RESIDENT", v, "a size such as 1GiB or 256MiB, or 0 (memory faults in on first touch)");
  }
  if (const char* v = env("SIMDEV_VA")) {
    auto b = parse_bytes(v);
    if (b && *b >= (uint64_t{1} << 30) && *b <= (uint64_t{1} << 44)) cfg.va_bytes = round_up(*b, kGranularity);
    else note_error(cfg, "SIMDEV_VA", v, "a size between 1GiB and 16TiB");
  }
  struct {
    const char* var;
    double* out;
  } rates[] = {{"SIMDEV_H2D_GBPS", &cfg.h2d_bytes_per_ns}, {"SIMDEV_D2H_GBPS", &cfg.d2h_bytes_per_ns}};
  for (auto& r : rates) {
    if (const char* v = env(r.var)) {
      auto gbps = parse_positive_double(v);
      if (gbps && *gbps > 0) *r.out = *gbps;  // 1 GB/s is one byte per ns
      else note_error(cfg, r.var, v, "a positive number of GB/s such as 53 or 0.5");
    }
  }
  if (const char* v = env("SIMDEV_DEVICES")) {
    auto n = parse_int(v);
    if (n && *n >= 1 && *n <= kMaxDevices) cfg.devices = *n;
    else note_error(cfg, "SIMDEV_DEVICES", v, "a number of devices from 1 to 8");
  }
  cfg.host_numa_ids.assign(cfg.devices, 0);
  if (const char* v = env("SIMDEV_HOST_NUMA_ID")) {
    // One node for every device, or a list with one node per device.
    std::vector<int> ids;
    std::stringstream ss(v);
    std::string item;
    bool ok = true;
    while (std::getline(ss, item, ',')) {
      auto id = parse_int(item);
      ok = ok && id && *id >= -1 && *id < 64;
      if (ok) ids.push_back(*id);
    }
    ok = ok && (ids.size() == 1 || ids.size() == size_t(cfg.devices));
    if (ok) cfg.host_numa_ids = ids.size() == 1 ? std::vector<int>(cfg.devices, ids[0]) : ids;
    else note_error(cfg, "SIMDEV_HOST_NUMA_ID", v,
                    "a NUMA node number 0..63 or -1 for none, or a comma list of one per device (SIMDEV_DEVICES)");
  }
  cfg.host_numa_id = cfg.host_numa_ids[0];
  if (const char* v = env("SIMDEV_PEER_ACCESS")) {
    std::string t = v;
    if (t == "0" || t == "1") cfg.peer_access = t == "1";
    else note_error(cfg, "SIMDEV_PEER_ACCESS", v, "0 (devices cannot access each other) or 1");
  }
  if (const char* v = env("SIMDEV_ATTRS")) {
    if (!parse_attributes(v, cfg.attributes))
      note_error(cfg, "SIMDEV_ATTRS", v, "a list like \"145:0,141:invalid\" (attribute:value or attribute:invalid)");
  }
  if (const char* v = env("SIMDEV_FAIL")) cfg.fail_spec = v;
  if (const char* v = env("SIMDEV_HOST_VMM")) {
    std::string t = v;
    if (t == "0" || t == "1") cfg.host_vmm = t == "1";
    else note_error(cfg, "SIMDEV_HOST_VMM", v, "0 (no host VMM) or 1");
  }
  if (const char* v = env("SIMDEV_REPORT_FAULTS")) {
    std::string t = v;
    if (t == "0" || t == "1") cfg.report_faults = t == "1";
    else note_error(cfg, "SIMDEV_REPORT_FAULTS", v, "0 or 1 (a line on stderr for each device fault)");
  }
  if (const char* v = env("SIMDEV_HOST_VMM_GRANULARITY")) {
    // Host mappings share the device's address space, so their granularity
    // is a power-of-two multiple of the device's.
    auto b = parse_bytes(v);
    if (b && *b >= kGranularity && (*b & (*b - 1)) == 0) cfg.host_vmm_granularity = *b;
    else note_error(cfg, "SIMDEV_HOST_VMM_GRANULARITY", v, "a power of two of at least 2MiB such as 2MiB or 1GiB");
  }
  cfg.driver_version = CUDA_VERSION;
  if (const char* v = env("SIMDEV_DRIVER_VERSION")) {
    // 1000 * major + 10 * minor; cuGetProcAddress (11.3) is the oldest entry
    // point programs find the driver through, and simdev cannot be newer
    // than the ABI it was built against.
    auto ver = parse_int(v);
    if (ver && *ver >= 11030 && *ver <= CUDA_VERSION && *ver % 10 == 0) cfg.driver_version = *ver;
    else
      note_error(cfg, "SIMDEV_DRIVER_VERSION", v,
                 ("a CUDA version written as 1000*major+10*minor, from 11030 to " + std::to_string(CUDA_VERSION) +
                  ", such as 12030")
                     .c_str());
  }
  return cfg;
}

}  // namespace simdev
