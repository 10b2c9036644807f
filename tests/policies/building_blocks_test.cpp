// Small parts: the excess tracker against brute force, the trigger table's lookup,
// link presets and their errors.
#include <gtest/gtest.h>

#include <random>

#include "policies/excess_tracker.hpp"
#include "policies/link_model.hpp"
#include "policies/trigger_table.hpp"

namespace tierrt::policy {
namespace {

TEST(ExcessTracker, MatchesBruteForce) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 50; ++round) {
    const std::uint32_t n = std::uniform_int_distribution<std::uint32_t>(1, 200)(rng);
    std::vector<double> v(n);
    for (auto& x : v) x = std::uniform_real_distribution<double>(-100, 100)(rng);
    ExcessTracker t(v);
    for (int op = 0; op < 200; ++op) {
      std::uint32_t b = std::uniform_int_distribution<std::uint32_t>(0, n)(rng);
      std::uint32_t e = std::uniform_int_distribution<std::uint32_t>(0, n)(rng);
      if (b > e) std::swap(b, e);
      if (op % 2 == 0) {
        const double d = std::uniform_real_distribution<double>(-20, 20)(rng);
        t.relieve(b, e, d);
        for (std::uint32_t i = b; i < e; ++i) v[i] -= d;
      } else if (b < e) {
        EXPECT_NEAR(t.max_over(b, e), *std::max_element(v.begin() + b, v.begin() + e), 1e-9);
      }
    }
    EXPECT_NEAR(t.max_overall(), *std::max_element(v.begin(), v.end()), 1e-9);
  }
}

TEST(TriggerTable, LooksUpByLaunchAndKeepsInsertionOrderWithinALaunch) {
  TriggerTable t({{5, Action::Prefetch, 1, 0}, {2, Action::Spill, 7, 2}, {5, Action::Spill, 3, 5}, {9, Action::Spill, 4, 9}},
                 8);  // launch 9 is past the step: dropped
  EXPECT_EQ(t.op_count(), 8u);
  EXPECT_EQ(t.all().size(), 3u);
  ASSERT_EQ(t.at(5).size(), 2u);
  EXPECT_EQ(t.at(5)[0].ordinal, 1u);
  EXPECT_EQ(t.at(5)[1].ordinal, 3u);
  ASSERT_EQ(t.at(2).size(), 1u);
  EXPECT_EQ(t.at(2)[0].action, Action::Spill);
  EXPECT_TRUE(t.at(0).empty());
  EXPECT_TRUE(t.at(100).empty());
}

TEST(LinkModel, Presets) {
  const auto p = parse_link("pcie5");
  EXPECT_DOUBLE_EQ(p.h2d_bytes_per_s, 53e9);
  EXPECT_DOUBLE_EQ(p.d2h_bytes_per_s, 53e9);
  const auto c = parse_link("c2c");
  EXPECT_DOUBLE_EQ(c.h2d_bytes_per_s, 375e9);
  EXPECT_DOUBLE_EQ(c.d2h_bytes_per_s, 297e9);
  const auto x = parse_link("100,80.5");
  EXPECT_DOUBLE_EQ(x.h2d_bytes_per_s, 100e9);
  EXPECT_DOUBLE_EQ(x.d2h_bytes_per_s, 80.5e9);
  EXPECT_DOUBLE_EQ(x.d2h_ns(80.5e9), 1e9);
}

TEST(LinkModel, BadSpecsAreOneLineErrors) {
  for (const char* bad : {"", "pcie4", "100", "100,", ",5", "0,5", "-1,5", "5,nan", "1,2,3", "abc,def"}) {
    try {
      parse_link(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("expected pcie5, c2c or H2D,D2H"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace tierrt::policy
