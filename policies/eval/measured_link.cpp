#include "policies/eval/measured_link.hpp"

#include <algorithm>
#include <cstdio>

namespace tierrt::policy {

std::optional<LinkModel> measured_link(const Trace& trace, const LinkModel& fallback) {
  double sum[2] = {0, 0};
  int n[2] = {0, 0};
  for (const auto& e : trace)
    if (e.kind == EventKind::CopyRate && e.sub < 2) sum[e.sub] += static_cast<double>(e.a), ++n[e.sub];
  if (!n[0] && !n[1]) return std::nullopt;
  const auto d2h = static_cast<int>(CopyDir::DeviceToHost), h2d = static_cast<int>(CopyDir::HostToDevice);
  LinkModel link = fallback;
  link.name = "measured";
  if (n[d2h]) link.d2h_bytes_per_s = sum[d2h] / n[d2h];
  if (n[h2d]) link.h2d_bytes_per_s = sum[h2d] / n[h2d];
  return link;
}

std::string describe_link(const LinkModel& link) {
  // Measured rates can be far below 1 GB/s (simdev's copies): keep a significant digit.
  const char* f = std::min(link.h2d_bytes_per_s, link.d2h_bytes_per_s) < 10e9 ? "%.2f" : "%.0f";
  char h2d[32], d2h[32];
  std::snprintf(h2d, sizeof h2d, f, link.h2d_bytes_per_s / 1e9);
  std::snprintf(d2h, sizeof d2h, f, link.d2h_bytes_per_s / 1e9);
  return link.name + " (H2D " + h2d + " GB/s, D2H " + d2h + " GB/s)";
}

}  // namespace tierrt::policy
