// The host link as the model sees it: one copy engine per direction, each with a
// sustained bandwidth. Presets are the figures pinned copies reach in practice.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace tierrt::policy {

struct LinkModel {
  std::string name;
  double h2d_bytes_per_s = 0;
  double d2h_bytes_per_s = 0;

  double h2d_ns(double bytes) const { return bytes / h2d_bytes_per_s * 1e9; }
  double d2h_ns(double bytes) const { return bytes / d2h_bytes_per_s * 1e9; }
};

// "pcie5" (53 GB/s each way, H100/H200 hosts), "c2c" (GH200 NVLink-C2C: 375 GB/s
// host-to-device, 297 GB/s device-to-host), or "H2D,D2H" in GB/s (e.g. "100,80").
// Throws std::invalid_argument with a one-line message.
LinkModel parse_link(std::string_view spec);

}  // namespace tierrt::policy
