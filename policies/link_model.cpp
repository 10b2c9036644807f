#include "policies/link_model.hpp"

#include <charconv>

namespace tierrt::policy {
namespace {

constexpr double kGB = 1e9;

// A rate in GB/s from 1 MB/s to 1 PB/s: beyond, a move's time is zero or
// infinite and the step model never ends.
constexpr double kMinGBps = 1e-3, kMaxGBps = 1e6;

bool parse_rate(std::string_view s, double& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end && out >= kMinGBps && out <= kMaxGBps;
}

}  // namespace

LinkModel parse_link(std::string_view spec) {
  if (spec == "pcie5") return {"pcie5", 53 * kGB, 53 * kGB};
  if (spec == "c2c") return {"c2c", 375 * kGB, 297 * kGB};
  const auto comma = spec.find(',');
  double h2d = 0, d2h = 0;
  if (comma == std::string_view::npos || !parse_rate(spec.substr(0, comma), h2d) ||
      !parse_rate(spec.substr(comma + 1), d2h))
    throw std::invalid_argument("bad link '" + std::string(spec) +
                                "': expected pcie5, c2c or H2D,D2H in GB/s, each from 0.001 to 1000000 (e.g. 100,80)");
  return {"custom", h2d * kGB, d2h * kGB};
}

}  // namespace tierrt::policy
