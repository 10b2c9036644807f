// Every TIERRT_* variable through read_settings, the function the engine
// reads its environment with, and the result through resolve(). The input
// is the machine's facts (16 bytes) and then one value per variable of
// kSettingVariables, in order, each ended by a NUL byte (an empty value is an
// unset variable). tierrt-run checks --budget and --host-budget with the same
// parse_byte_size, so its values are covered here too.
#include <array>
#include <cstring>
#include <string>

#include "fuzz_input.h"
#include "fuzz_target.h"
#include "runtime/settings.h"

namespace {

constexpr std::size_t kVariables = std::size(tierrt::kSettingVariables);
std::array<std::string, kVariables> g_values;

const char* fake_getenv(const char* name) {
  for (std::size_t i = 0; i < kVariables; ++i)
    if (std::strcmp(name, tierrt::kSettingVariables[i]) == 0) return g_values[i].c_str();
  FUZZ_CHECK(!"read_settings reads a variable kSettingVariables does not list");
}

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos; }

void check_byte_size(const std::optional<tierrt::config::ByteSize>& b, std::uint64_t whole) {
  if (!b || !b->relative) return;
  FUZZ_CHECK(b->fraction > 0 && b->fraction <= 1);
  FUZZ_CHECK(b->resolve(whole) <= whole);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  tierrt::MachineFacts machine;
  machine.device_total = in.take<std::uint64_t>();
  machine.physical_ram = in.take<std::uint64_t>();
  for (auto& v : g_values) v = in.take_until('\0');

  tierrt::Settings s;
  std::string error;
  if (!tierrt::read_settings(&s, &error, fake_getenv)) {
    FUZZ_CHECK(one_line(error));
    FUZZ_CHECK(error.rfind("tierrt: TIERRT_", 0) == 0);
    return 0;
  }
  FUZZ_CHECK(error.empty());
  check_byte_size(s.device_budget, machine.device_total);
  check_byte_size(s.host_budget, machine.physical_ram);
  // Rates from 1 MB/s to 1 PB/s: beyond, the step model's times are 0 or infinite.
  FUZZ_CHECK(s.link.h2d_bytes_per_s >= 1e6 && s.link.h2d_bytes_per_s <= 1e15);
  FUZZ_CHECK(s.link.d2h_bytes_per_s >= 1e6 && s.link.d2h_bytes_per_s <= 1e15);
  const tierrt::ResolvedSettings r = tierrt::resolve(s, machine);
  if (!s.device_budget) FUZZ_CHECK(r.device_budget <= machine.device_total);
  if (!s.host_budget && s.mode != tierrt::Mode::Observe) FUZZ_CHECK(r.host_budget <= machine.physical_ram);
  if (s.mode == tierrt::Mode::Observe) FUZZ_CHECK(r.host_budget == 1);

  // Each value alone, as a byte size either way (tierrt-run's --budget takes
  // percentages, --host-budget too).
  for (const auto& v : g_values)
    for (bool percent : {false, true}) {
      std::string e;
      const auto b = tierrt::config::parse_byte_size("--budget", v, percent, &e);
      if (!b) FUZZ_CHECK(one_line(e));
      else FUZZ_CHECK(percent || !b->relative);
      check_byte_size(b, machine.device_total);
    }
  return 0;
}
