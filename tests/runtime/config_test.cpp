// The configuration parser on its own: byte sizes with units and
// percentages, and the one-line refusal of a bad value.
#include "runtime/config.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace tierrt::config {
namespace {

std::uint64_t bytes(std::string_view v) {
  std::string err;
  auto b = parse_byte_size("X", v, true, &err);
  EXPECT_TRUE(b.has_value()) << err;
  return b ? b->resolve(1000) : 0;
}

TEST(ConfigBytes, UnitsAndPercent) {
  EXPECT_EQ(bytes("1073741824"), 1073741824u);
  EXPECT_EQ(bytes("512MiB"), 512ull << 20);
  EXPECT_EQ(bytes(" 1.5 GiB "), 3ull << 29);
  EXPECT_EQ(bytes("64k"), 64ull << 10);
  EXPECT_EQ(bytes("2GB"), 2000000000u);
  EXPECT_EQ(bytes("3 b"), 3u);
  EXPECT_EQ(bytes("1TiB"), 1ull << 40);
  EXPECT_EQ(bytes("90%"), 900u);
  EXPECT_EQ(bytes("100%"), 1000u);
}

TEST(ConfigBytes, ErrorsNameTheVariableTheValueAndTheForms) {
  std::string err;
  EXPECT_FALSE(parse_byte_size("TIERRT_DEVICE_BUDGET", "12 parsecs", true, &err));
  EXPECT_NE(err.find("TIERRT_DEVICE_BUDGET"), std::string::npos);
  EXPECT_NE(err.find("12 parsecs"), std::string::npos);
  EXPECT_NE(err.find("GiB"), std::string::npos);
  EXPECT_NE(err.find('%'), std::string::npos);
  EXPECT_EQ(err.find('\n'), std::string::npos);
  for (const char* bad : {"", "-1", "1e9", "0%", "101%", "1.5", "0.5B", "GiB", "1..2M"})
    EXPECT_FALSE(parse_byte_size("V", bad, true, &err)) << bad;
  EXPECT_FALSE(parse_byte_size("TIERRT_MIN_BYTES", "50%", false, &err));
  EXPECT_EQ(err.find("percentage"), std::string::npos);
  EXPECT_FALSE(parse_byte_size("V", "99999999999TiB", false, &err));
}

TEST(ConfigChoice, CaseAndBlanksDoNotMatter) {
  std::string err;
  EXPECT_EQ(parse_choice("V", "copy", {"auto", "remap", "copy"}, &err), 2);
  EXPECT_EQ(parse_choice("V", " Remap ", {"auto", "remap", "copy"}, &err), 1);
  EXPECT_EQ(parse_choice("V", "AUTO", {"auto", "remap", "copy"}, &err), 0);
  EXPECT_EQ(normalized("\t PCIe5 "), "pcie5");
}

TEST(ConfigChoice, RefusalIsOneLineNamingTheChoices) {
  std::string err;
  EXPECT_FALSE(parse_choice("TIERRT_MODE", "on", {"off", "observe", "tier"}, &err));
  EXPECT_EQ(err, "tierrt: TIERRT_MODE=\"on\" is not accepted; expected one of off, observe, tier");
  EXPECT_EQ(refusal("TIERRT_LINK", "x", "pcie5 or c2c"), "tierrt: TIERRT_LINK=\"x\" is not accepted; expected pcie5 or c2c");
}

std::map<std::string, std::string> g_env;
const char* fake_getenv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

TEST(OutputPath, PidRankAndPercent) {
  const std::string pid = std::to_string(getpid());
  g_env = {};
  EXPECT_EQ("stats." + pid + ".0.txt", expand_output_path("stats.%p.%r.txt", &fake_getenv));
  EXPECT_EQ("plain.txt", expand_output_path("plain.txt", &fake_getenv));
  EXPECT_EQ("100%.txt", expand_output_path("100%%.txt", &fake_getenv));
  EXPECT_EQ("a%xb%", expand_output_path("a%xb%", &fake_getenv));  // other % forms stay as written
  // The rank: RANK, else SLURM_PROCID, else OMPI_COMM_WORLD_RANK.
  g_env = {{"OMPI_COMM_WORLD_RANK", "5"}};
  EXPECT_EQ("r5", expand_output_path("r%r", &fake_getenv));
  g_env.emplace("SLURM_PROCID", "3");
  EXPECT_EQ("r3", expand_output_path("r%r", &fake_getenv));
  g_env.emplace("RANK", "7");
  EXPECT_EQ("r7-" + pid, expand_output_path("r%r-%p", &fake_getenv));
}

// Each device's engine writes files of its own: %d is the device; without
// it, every engine after the first gets ".devN" before the extension.
TEST(OutputPath, DeviceOfTheEngine) {
  EXPECT_EQ("stats.1.txt", device_output_path("stats.%d.txt", 1, true));
  EXPECT_EQ("stats.0.txt", device_output_path("stats.%d.txt", 0, false));
  EXPECT_EQ("stats.txt", device_output_path("stats.txt", 0, false));
  EXPECT_EQ("stats.dev3.txt", device_output_path("stats.txt", 3, true));
  EXPECT_EQ("run.dev2", device_output_path("run", 2, true));
  EXPECT_EQ("out.d/run.dev2", device_output_path("out.d/run", 2, true));  // a dot in a folder is no extension
  EXPECT_EQ(".stats.dev1", device_output_path(".stats", 1, true));        // nor is a dot file's
  EXPECT_EQ("-", device_output_path("-", 1, true));                       // stderr stays stderr
  EXPECT_EQ("", device_output_path("", 1, true));
  // %% stays for expand_output_path to unescape: "%%d" is a literal "%d".
  EXPECT_EQ("a%%d.dev1", device_output_path("a%%d", 1, true));
  EXPECT_EQ("a%d.dev1", expand_output_path(device_output_path("a%%d", 1, true), &fake_getenv));
  EXPECT_EQ("s.4.p" + std::to_string(getpid()), expand_output_path(device_output_path("s.%d.p%p", 4, true), &fake_getenv));
}

}  // namespace
}  // namespace tierrt::config
