// Number formatting shared by the table, the CSV and the SVG.
#pragma once

#include <cstdio>
#include <string>

namespace tierrt::replay {

inline constexpr double kGiB = double(1ull << 30);

// One number through a printf format ("%.2f").
inline std::string format_number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace tierrt::replay
