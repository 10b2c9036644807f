// Every TIERRT_* variable: accepted values, units, and the one-line refusal
// of a bad value that names the variable and what it accepts.
#include "runtime/settings.h"

#include <gtest/gtest.h>

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
  EXPECT_EQ(Mode::kTier, s.mode);  // preloading is consent
  EXPECT_FALSE(s.allocator.device_budget);
  EXPECT_FALSE(s.allocator.host_budget);
  EXPECT_EQ(1u << 20, s.allocator.min_bytes);
  EXPECT_EQ(alloc::SpillMode::Auto, s.allocator.spill_mode);
  EXPECT_EQ("planner", s.policy);
  EXPECT_FALSE(s.virtual_meminfo);
  EXPECT_TRUE(s.stats.empty());
  EXPECT_TRUE(s.trace.empty());
  EXPECT_TRUE(s.record.empty());
  EXPECT_EQ(LogLevel::kWarn, s.log_level);
  EXPECT_TRUE(s.log_file.empty());
}

TEST_F(SettingsTest, Mode) {
  for (auto [v, m] : {std::pair{"off", Mode::kOff}, {"observe", Mode::kObserve}, {"tier", Mode::kTier}, {"TIER", Mode::kTier}}) {
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
    ASSERT_TRUE(s.allocator.device_budget);
    EXPECT_EQ(c.relative, s.allocator.device_budget->relative) << c.value;
    if (c.relative) EXPECT_DOUBLE_EQ(c.fraction, s.allocator.device_budget->fraction);
    else EXPECT_EQ(c.bytes, s.allocator.device_budget->bytes) << c.value;
  }
  for (const char* bad : {"lots", "-1GiB", "12 parsecs", "0%", "150%", "GiB"}) expect_refused("TIERRT_DEVICE_BUDGET", bad);
}

TEST_F(SettingsTest, HostBudgetAndMinBytes) {
  g_env = {{"TIERRT_HOST_BUDGET", "64GiB"}, {"TIERRT_MIN_BYTES", "4MiB"}};
  Settings s;
  std::string err;
  ASSERT_TRUE(read(&s, &err)) << err;
  EXPECT_EQ(64ull << 30, s.allocator.host_budget->bytes);
  EXPECT_EQ(4ull << 20, s.allocator.min_bytes);
  expect_refused("TIERRT_HOST_BUDGET", "plenty");
  expect_refused("TIERRT_MIN_BYTES", "50%");  // a size, not a share of anything
}

TEST_F(SettingsTest, SpillMode) {
  for (auto [v, m] : {std::pair{"auto", alloc::SpillMode::Auto}, {"remap", alloc::SpillMode::Remap},
                      {"copy", alloc::SpillMode::Copy}}) {
    g_env = {{"TIERRT_SPILL_MODE", v}};
    Settings s;
    std::string err;
    ASSERT_TRUE(read(&s, &err)) << err;
    EXPECT_EQ(m, s.allocator.spill_mode);
  }
  expect_refused("TIERRT_SPILL_MODE", "managed");
}

TEST_F(SettingsTest, Policy) {
  for (const char* v : {"reactive", "planner"}) {
    g_env = {{"TIERRT_POLICY", v}};
    Settings s;
    std::string err;
    ASSERT_TRUE(read(&s, &err)) << err;
    EXPECT_EQ(v, s.policy);
  }
  expect_refused("TIERRT_POLICY", "magic");
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
  EXPECT_EQ(LogLevel::kDebug, s.log_level);
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
                     std::string(var) == "TIERRT_RECORD" || std::string(var) == "TIERRT_LOG_FILE";
    if (free_text) {
      ASSERT_TRUE(ok) << var;
      Settings d;
      g_env.clear();
      ASSERT_TRUE(read(&d, &err));
      EXPECT_TRUE(s.stats != d.stats || s.trace != d.trace || s.record != d.record || s.log_file != d.log_file) << var;
    } else {
      EXPECT_FALSE(ok) << var << " accepted garbage";
    }
  }
}

}  // namespace
}  // namespace tierrt
