// Number formatting shared by the table, the CSV and the SVG.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace tierrt::replay {

inline constexpr double kGiB = double(1ull << 30);

// One number through a printf format ("%.2f").
inline std::string format_number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Text for a one-line error: control characters (a newline in an argument or
// a path) written as \xNN.
inline std::string one_line(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

}  // namespace tierrt::replay
