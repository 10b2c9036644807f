// Every TIERRT_* variable: accepted values, units, defaults, and the one-line
// refusal of a bad value that names the variable and what it accepts; and the
// resolution of the settings against the machine into concrete budgets.
#include "runtime/settings.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

namespace tierrt {
namespace {

std::map<std::string, std::string> g_env;

const char* fake_getenv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

class SettingsTest : public ::testing::Test {
 protected:
  void SetUp() override { g_env.clear(); }
  bool read(Settings* s, std::string* err) { return read_settings(s, err, &fake_getenv); }

  // A bad value is refused with one line naming the variable and the value.
  void expect_refused(const std::string& var, const std::string& value) {
    g_env = {{var, value}};
    Settings s;
    std::string err;
    EXPECT_FALSE(read(&s, &err)) << var << "=" << value;
    EXPECT_NE(err.find(var), std::string::npos) << err;
    EXPECT_NE(err.find("\"" + value + "\""), std::string::npos) << err;
    EXPECT_NE(err.find("expected"), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  }
};

TEST_F(SettingsTest, DefaultsWithAnEmptyEnvironment) {
  Settings s;
  std::string err;
  ASSERT_TRUE(read(&s, &err)) << err;
  EXPECT_EQ(Mode::Tier, s.mode);  // preloading is consent
  EXPECT_FALSE(s.device_budget);
  EXPECT_FALSE(s.host_budget);
  EXPECT_EQ(1u << 20, s.min_bytes);
  EXPECT_EQ(alloc::SpillMode::Auto, s.spill_mode);
  EXPECT_EQ(Policy::Planner, s.policy);
  EXPECT_EQ("pcie5", s.link.name);
  EXPECT_DOUBLE_EQ(53e9, s.link.h2d_bytes_per_s);
  EXPECT_DOUBLE_EQ(53e9, s.link.d2h_bytes_per_s);
  EXPECT_FALSE(s.virtual_meminfo);
  EXPECT_TRUE(s.stats.empty());
  EXPECT_TRUE(s.trace.empty());
  EXPECT_TRUE(s.record.empty());
  EXPECT_EQ(LogLevel::Warn, s.log_level);
  EXPECT_TRUE(s.log_file.empty());
}

TEST_F(SettingsTest, Mode) {
  for (auto [v, m] : {std::pair{"off", Mode::Off}, {"observe", Mode::Observe}, {"tier", Mode::Tier}, {"TIER", Mode::Tier}}) {
    g_env = {{"TIERRT_MODE", v}};
    Settings s;
    std::string err;
    ASSERT_TRUE(read(&s, &err)) << err;
    EXPECT_EQ(m, s.mode) << v;
  }
  expect_refused("TIERRT_MODE", "on");
}

TEST_F(SettingsTest, DeviceBudgetTakesUnitsAndPercent) {
  struct Case {
    const char* value;
    bool relative;
    uint64_t bytes;
    double fraction;
  } cases[] = {{"1073741824", false, 1ull << 30, 0},   {"512MiB", false, 512ull << 20, 0},
               {"1.5GiB", false, 3ull << 29, 0},       {"2GB", false, 2000000000ull, 0},
               {"64k", false, 64ull << 10, 0},         {"90%", true, 0, 0.9}};
  for (const Case& c : cases) {
    g_env = {{"TIERRT_DEVICE_BUDGET", c.value}};
    Settings s;
    std::string err;
    ASSERT_TRUE(read(&s, &err)) << c.value << ": " << err;
    ASSERT_TRUE(s.device_budget);
    EXPECT_EQ(c.relative, s.device_budget->relative) << c.value;
    if (c.relative) EXPECT_DOUBLE_EQ(c.fraction, s.device_budget->fraction);
    else EXPECT_EQ(c.bytes, s.device_budget->bytes) << c.value;
  }
  for (const char* bad : {"lots", "-1GiB", "12 parsecs", "0%", "150%", "GiB"}) expect_refused("TIERRT_DEVICE_BUDGET", bad);
}

TEST_F(SettingsTest, HostBudgetAndMinBytes) {
  g_env = {{"TIERRT_HOST_BUDGET", "64GiB"}, {"TIERRT_MIN_BYTES", "4MiB"}};
  Settings s;
  std::string err;
  ASSERT_TRUE(read(&s, &err)) << err;
  EXPECT_EQ(64ull << 30, s.host_budget->bytes);
  EXPECT_EQ(4ull << 20, s.min_bytes);
  expect_refused("TIERRT_HOST_BUDGET", "plenty");
  expect_refused("TIERRT_MIN_BYTES", "50%");  // a size, not a share of anything
}

TEST_F(SettingsTest, PointerScanBytes) {
  Settings d;
  std::string err;
  g_env.clear();
  ASSERT_TRUE(read(&d, &err)) << err;
  EXPECT_EQ(64u << 10, d.pointer_scan_bytes);
  for (auto [value, bytes] : {std::pair<const char*, std::uint64_t>{"0", 0}, {"1MiB", 1u << 20}, {"4096", 4096}}) {
    g_env = {{"TIERRT_POINTER_SCAN_BYTES", value}};
    Settings s;
    ASSERT_TRUE(read(&s, &err)) << err;
    EXPECT_EQ(bytes, s.pointer_scan_bytes) << value;
  }
  expect_refused("TIERRT_POINTER_SCAN_BYTES", "50%");  // a size, not a share of anything
  expect_refused("TIERRT_POINTER_SCAN_BYTES", "some");
}

TEST_F(SettingsTest, HostBudgetTakesAPercentOfRam) {
  g_env = {{"TIERRT_HOST_BUDGET", "25%"}};
  Settings s;
  std::string err;
  ASSERT_TRUE(read(&s, &err)) << err;
  ASSERT_TRUE(s.host_budget);
  EXPECT_TRUE(s.host_budget->relative);
  EXPECT_DOUBLE_EQ(0.25, s.host_budget->fraction);
  for (const char* bad : {"0%", "101%", "-5GiB", "1e9"}) expect_refused("TIERRT_HOST_BUDGET", bad);
  for (const char* bad : {"lots", "1.5", "-1", "4 parsecs"}) expect_refused("TIERRT_MIN_BYTES", bad);
}

TEST_F(SettingsTest, ReadsTheAllocatorVariables) {
  g_env = {{"TIERRT_DEVICE_BUDGET", "80%"}, {"TIERRT_HOST_BUDGET", "16GiB"}, {"TIERRT_MIN_BYTES", "4MiB"},
           {"TIERRT_SPILL_MODE", "COPY"}};
  Settings c;
  std::string err;
  ASSERT_TRUE(read(&c, &err)) << err;
  EXPECT_EQ(c.device_budget->resolve(1000), 800u);
  EXPECT_EQ(c.host_budget->resolve(1), 16ull << 30);
  EXPECT_EQ(c.min_bytes, 4ull << 20);
  EXPECT_EQ(c.spill_mode, alloc::SpillMode::Copy);
  g_env["TIERRT_SPILL_MODE"] = "managed";
  EXPECT_FALSE(read(&c, &err));
  EXPECT_NE(err.find("TIERRT_SPILL_MODE=\"managed\""), std::string::npos);
  EXPECT_NE(err.find("auto, remap, copy"), std::string::npos);
  g_env.clear();
  Settings d;
  ASSERT_TRUE(read(&d, &err));
  EXPECT_EQ(d.min_bytes, 1ull << 20);
  EXPECT_FALSE(d.device_budget.has_value());
  EXPECT_EQ(d.spill_mode, alloc::SpillMode::Auto);
}

TEST_F(SettingsTest, UseEventWindowInMicroseconds) {
  Settings s;
  std::string err;
  ASSERT_TRUE(read(&s, &err)) << err;
  EXPECT_EQ(s.use_event_window_us, 20u);
  g_env = {{"TIERRT_USE_EVENT_WINDOW_US", "0"}};  // every launch records its own event
  ASSERT_TRUE(read(&s, &err)) << err;
  EXPECT_EQ(s.use_event_window_us, 0u);
  g_env = {{"TIERRT_USE_EVENT_WINDOW_US", "1000000"}};
  ASSERT_TRUE(read(&s, &err)) << err;
  EXPECT_EQ(resolve(s, MachineFacts{16ull << 30, 64ull << 30, 0, 1}).use_event_window_ns, 1'000'000'000u);
  for (const char* bad : {"-1", "1000001", "20us", "1.5", "soon"}) expect_refused("TIERRT_USE_EVENT_WINDOW_US", bad);
}

TEST_F(SettingsTest, SpillMode) {
  for (auto [v, m] : {std::pair{"auto", alloc::SpillMode::Auto}, {"remap", alloc::SpillMode::Remap},
                      {"copy", alloc::SpillMode::Copy}}) {
    g_env = {{"TIERRT_SPILL_MODE", v}};
    Settings s;
    std::string err;
    ASSERT_TRUE(read(&s, &err)) << err;
    EXPECT_EQ(m, s.spill_mode);
  }
  expect_refused("TIERRT_SPILL_MODE", "managed");
}

TEST_F(SettingsTest, Policy) {
  for (auto [v, p] : {std::pair{"reactive", Policy::Reactive}, {"planner", Policy::Planner},
                      {"Reactive", Policy::Reactive}}) {
    g_env = {{"TIERRT_POLICY", v}};
    Settings s;
    std::string err;
    ASSERT_TRUE(read(&s, &err)) << err;
    EXPECT_EQ(p, s.policy) << v;
  }
  expect_refused("TIERRT_POLICY", "magic");
}

TEST_F(SettingsTest, LinkPresetsAndRates) {
  struct Case {
    const char* value;
    const char* name;
    double h2d, d2h;
  } cases[] = {{"pcie5", "pcie5", 53e9, 53e9},  {"c2c", "c2c", 375e9, 297e9},   {"C2C", "c2c", 375e9, 297e9},
               {" pcie5 ", "pcie5", 53e9, 53e9}, {"100,80", "custom", 100e9, 80e9}, {"12.5,6", "custom", 12.5e9, 6e9}};
  for (const Case& c : cases) {
    g_env = {{"TIERRT_LINK", c.value}};
    Settings s;
    std::string err;
    ASSERT_TRUE(read(&s, &err)) << c.value << ": " << err;
    EXPECT_EQ(c.name, s.link.name) << c.value;
    EXPECT_DOUBLE_EQ(c.h2d, s.link.h2d_bytes_per_s) << c.value;
    EXPECT_DOUBLE_EQ(c.d2h, s.link.d2h_bytes_per_s) << c.value;
  }
  for (const char* bad : {"pcie4", "nvlink", "100", "100,", ",80", "0,80", "100,-1", "100,80,60", "fast,slow"})
    expect_refused("TIERRT_LINK", bad);
  // The refusal names the forms that are accepted.
  g_env = {{"TIERRT_LINK", "pcie4"}};
  Settings s;
  std::string err;
  ASSERT_FALSE(read(&s, &err));
  for (const char* form : {"pcie5", "c2c", "H2D,D2H", "GB/s"}) EXPECT_NE(err.find(form), std::string::npos) << err;
}

TEST_F(SettingsTest, FlagsAndOutputs) {
  g_env = {{"TIERRT_VIRTUAL_MEMINFO", "1"}, {"TIERRT_STATS", "1"}, {"TIERRT_TRACE", "/tmp/t.json"},
           {"TIERRT_RECORD", "/tmp/r.trace"}, {"TIERRT_LOG", "debug"}, {"TIERRT_LOG_FILE", "/tmp/tierrt.log"}};
  Settings s;
  std::string err;
  ASSERT_TRUE(read(&s, &err)) << err;
  EXPECT_TRUE(s.virtual_meminfo);
  EXPECT_EQ("-", s.stats);
  EXPECT_EQ("/tmp/t.json", s.trace);
  EXPECT_EQ("/tmp/r.trace", s.record);
  EXPECT_EQ(LogLevel::Debug, s.log_level);
  EXPECT_EQ("/tmp/tierrt.log", s.log_file);

  g_env = {{"TIERRT_STATS", "/tmp/stats.txt"}, {"TIERRT_VIRTUAL_MEMINFO", "off"}};
  ASSERT_TRUE(read(&s, &err)) << err;
  EXPECT_EQ("/tmp/stats.txt", s.stats);
  EXPECT_FALSE(s.virtual_meminfo);
  g_env = {{"TIERRT_STATS", "0"}};
  ASSERT_TRUE(read(&s, &err)) << err;
  EXPECT_TRUE(s.stats.empty());

  expect_refused("TIERRT_VIRTUAL_MEMINFO", "maybe");
  expect_refused("TIERRT_LOG", "verbose");
}

TEST_F(SettingsTest, EveryDocumentedVariableIsRead) {
  // Each variable, set to a bad value where one exists, must change the
  // outcome: nothing in the list is ignored.
  for (const char* var : kSettingVariables) {
    g_env = {{var, "definitely not valid %%"}};
    Settings s;
    std::string err;
    bool ok = read(&s, &err);
    bool free_text = std::string(var) == "TIERRT_STATS" || std::string(var) == "TIERRT_TRACE" ||
                     std::string(var) == "TIERRT_RECORD" || std::string(var) == "TIERRT_LOG_FILE" ||
                     std::string(var) == "TIERRT_PLOT";
    if (free_text) {
      ASSERT_TRUE(ok) << var;
      Settings d;
      g_env.clear();
      ASSERT_TRUE(read(&d, &err));
      EXPECT_TRUE(s.stats != d.stats || s.trace != d.trace || s.record != d.record || s.log_file != d.log_file ||
                  s.plot != d.plot)
          << var;
    } else {
      EXPECT_FALSE(ok) << var << " accepted garbage";
    }
  }
}

constexpr std::uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

Settings read_env(std::map<std::string, std::string> env) {
  g_env = std::move(env);
  Settings s;
  std::string err;
  EXPECT_TRUE(read_settings(&s, &err, &fake_getenv)) << err;
  return s;
}

TEST(ResolveTest, DefaultsAreTheDeviceLessAReserveAndHalfOfRam) {
  // The reserve is 1/16 of the device, at most 512 MiB.
  const ResolvedSettings big = resolve(read_env({}), {80 * kGiB, 512 * kGiB});
  EXPECT_EQ(80 * kGiB - 512 * kMiB, big.device_budget);
  EXPECT_EQ(256 * kGiB, big.host_budget);
  EXPECT_EQ(1 * kMiB, big.min_bytes);
  EXPECT_EQ(alloc::SpillMode::Auto, big.spill_mode);
  const ResolvedSettings small = resolve(read_env({}), {4 * kGiB, 16 * kGiB});
  EXPECT_EQ(4 * kGiB - 256 * kMiB, small.device_budget);
  EXPECT_EQ(8 * kGiB, small.host_budget);
}

TEST(ResolveTest, PercentagesAreOfTheDeviceAndOfRam) {
  const Settings s = read_env({{"TIERRT_DEVICE_BUDGET", "75%"}, {"TIERRT_HOST_BUDGET", "25%"}});
  const ResolvedSettings r = resolve(s, {80 * kGiB, 512 * kGiB});
  EXPECT_EQ(60 * kGiB, r.device_budget);
  EXPECT_EQ(128 * kGiB, r.host_budget);
  const ResolvedSettings all = resolve(read_env({{"TIERRT_DEVICE_BUDGET", "100%"}}), {80 * kGiB, 512 * kGiB});
  EXPECT_EQ(80 * kGiB, all.device_budget);
}

TEST(ResolveTest, ExplicitValuesPassThrough) {
  const Settings s = read_env({{"TIERRT_DEVICE_BUDGET", "24GiB"}, {"TIERRT_HOST_BUDGET", "100GiB"},
                               {"TIERRT_MIN_BYTES", "4MiB"}, {"TIERRT_SPILL_MODE", "remap"}});
  // Whatever the machine: an explicit budget is the user's to choose, as far
  // as the device has the memory (a larger one is clamped to the device).
  for (MachineFacts m : {MachineFacts{80 * kGiB, 512 * kGiB}, MachineFacts{16 * kGiB, 64 * kGiB}}) {
    const ResolvedSettings r = resolve(s, m);
    EXPECT_EQ(std::min(24 * kGiB, m.device_total), r.device_budget);
    EXPECT_EQ(100 * kGiB, r.host_budget);
    EXPECT_EQ(4 * kMiB, r.min_bytes);
    EXPECT_EQ(alloc::SpillMode::Remap, r.spill_mode);
  }
}

TEST(ResolveTest, ADeviceBudgetAboveTheDeviceIsClampedToIt) {
  const MachineFacts m{128 * kMiB, 16 * kGiB};
  EXPECT_EQ(128 * kMiB, resolve(read_env({{"TIERRT_DEVICE_BUDGET", "99999TiB"}}), m).device_budget);
  EXPECT_EQ(128 * kMiB, resolve(read_env({{"TIERRT_DEVICE_BUDGET", "129MiB"}}), m).device_budget);
  EXPECT_EQ(128 * kMiB, resolve(read_env({{"TIERRT_DEVICE_BUDGET", "128MiB"}}), m).device_budget);
  EXPECT_EQ(64 * kMiB, resolve(read_env({{"TIERRT_DEVICE_BUDGET", "64MiB"}}), m).device_budget);
  // A device whose size is not known (0) clamps nothing.
  EXPECT_EQ(1 * kGiB, resolve(read_env({{"TIERRT_DEVICE_BUDGET", "1GiB"}}), {0, 16 * kGiB}).device_budget);
}

TEST_F(SettingsTest, AZeroBudgetIsRefusedNamingTheVariable) {
  for (const char* var : {"TIERRT_DEVICE_BUDGET", "TIERRT_HOST_BUDGET"})
    for (const char* zero : {"0", "0GiB", "0.0MiB"}) expect_refused(var, zero);
  g_env = {{"TIERRT_DEVICE_BUDGET", "0"}};
  Settings s;
  std::string err;
  ASSERT_FALSE(read(&s, &err));
  EXPECT_NE(err.find("above zero"), std::string::npos) << err;
}

TEST_F(SettingsTest, ADashIsStderrForEveryOutput) {
  for (const char* var : {"TIERRT_STATS", "TIERRT_TRACE", "TIERRT_RECORD"}) {
    for (const char* err_name : {"-", "stderr", "1"}) {
      g_env = {{var, err_name}};
      Settings s;
      std::string err;
      ASSERT_TRUE(read(&s, &err)) << err;
      EXPECT_EQ("-", s.stats + s.trace + s.record) << var << "=" << err_name;
    }
    g_env = {{var, "off"}};
    Settings s;
    std::string err;
    ASSERT_TRUE(read(&s, &err)) << err;
    EXPECT_EQ("", s.stats + s.trace + s.record) << var;
  }
}

TEST_F(SettingsTest, TwoOutputsOnOnePathAreRefused) {
  const char* outputs[] = {"TIERRT_STATS", "TIERRT_TRACE", "TIERRT_RECORD", "TIERRT_LOG_FILE"};
  for (const char* a : outputs) {
    for (const char* b : outputs) {
      if (std::string(a) >= b) continue;
      g_env = {{a, "/tmp/out.%p"}, {b, "/tmp/./out.%p"}};
      Settings s;
      std::string err;
      EXPECT_FALSE(read(&s, &err)) << a << " " << b;
      EXPECT_NE(err.find(a), std::string::npos) << err;
      EXPECT_NE(err.find(b), std::string::npos) << err;
      EXPECT_EQ(err.find('\n'), std::string::npos) << err;
    }
  }
  // Apart, or both on stderr: accepted.
  g_env = {{"TIERRT_STATS", "-"}, {"TIERRT_TRACE", "-"}, {"TIERRT_RECORD", "/tmp/r.%p"}, {"TIERRT_LOG_FILE", "/tmp/l"}};
  Settings s;
  std::string err;
  EXPECT_TRUE(read(&s, &err)) << err;
}

TEST(ResolveTest, ObserveModeNeverMoves) {
  // A host budget of one byte: every spill is refused as "host full".
  const MachineFacts m{80 * kGiB, 512 * kGiB};
  EXPECT_EQ(1u, resolve(read_env({{"TIERRT_MODE", "observe"}}), m).host_budget);
  const ResolvedSettings r =
      resolve(read_env({{"TIERRT_MODE", "observe"}, {"TIERRT_HOST_BUDGET", "64GiB"}, {"TIERRT_DEVICE_BUDGET", "50%"}}), m);
  EXPECT_EQ(1u, r.host_budget);
  EXPECT_EQ(40 * kGiB, r.device_budget);  // still counted against the budget
  EXPECT_EQ(64 * kGiB, resolve(read_env({{"TIERRT_MODE", "tier"}, {"TIERRT_HOST_BUDGET", "64GiB"}}), m).host_budget);
}

}  // namespace
}  // namespace tierrt
