#include "runtime/settings.h"

#include <cstdlib>

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

// "1" or "-" means the summary goes to stderr; "0"/"off" turns it off.
bool parse_output(const char* value, std::string* out) {
  std::string v = value;
  if (v == "0" || v == "off" || v == "false" || v == "no") out->clear();
  else if (v == "1" || v == "on" || v == "true" || v == "yes" || v == "-" || v == "stderr") *out = "-";
  else *out = v;
  return true;
}

}  // namespace

bool read_settings(Settings* out, std::string* error, config::GetenvFn getenv_fn) {
  if (!getenv_fn) getenv_fn = [](const char* n) -> const char* { return std::getenv(n); };
  Settings s;
  if (const char* v = value_of(getenv_fn, "TIERRT_MODE")) {
    auto k = config::parse_choice("TIERRT_MODE", v, {"off", "observe", "tier"}, error);
    if (!k) return false;
    s.mode = static_cast<Mode>(*k);
  }
  if (!config::read_allocator_config(&s.allocator, error, getenv_fn)) return false;
  if (const char* v = value_of(getenv_fn, "TIERRT_POLICY")) {
    auto k = config::parse_choice("TIERRT_POLICY", v, {"reactive", "planner"}, error);
    if (!k) return false;
    s.policy = *k == 0 ? "reactive" : "planner";
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_VIRTUAL_MEMINFO")) {
    if (!parse_flag("TIERRT_VIRTUAL_MEMINFO", v, &s.virtual_meminfo, error)) return false;
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_STATS")) parse_output(v, &s.stats);
  if (const char* v = value_of(getenv_fn, "TIERRT_TRACE")) s.trace = v;
  if (const char* v = value_of(getenv_fn, "TIERRT_RECORD")) s.record = v;
  if (const char* v = value_of(getenv_fn, "TIERRT_LOG")) {
    auto k = config::parse_choice("TIERRT_LOG", v, {"off", "error", "warn", "info", "debug"}, error);
    if (!k) return false;
    s.log_level = static_cast<LogLevel>(*k);
  }
  if (const char* v = value_of(getenv_fn, "TIERRT_LOG_FILE")) s.log_file = v;
  *out = std::move(s);
  return true;
}

}  // namespace tierrt
