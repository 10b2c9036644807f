#include "runtime/config.h"

#include "runtime/rank.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

namespace tierrt::config {

namespace {

constexpr std::string_view kByteForms =
    "a byte count with an optional unit B, KiB, MiB, GiB, TiB (or K, M, G, T; "
    "KB, MB, GB, TB are powers of 1000), e.g. 1073741824, 512MiB, 1.5GiB";

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

void set_error(std::string* error, std::string_view variable, std::string_view value,
               std::string_view accepted) {
  if (error != nullptr) *error = refusal(variable, value, accepted);
}

}  // namespace

std::string printable(std::string_view value) {
  std::string r;
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      r += c;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      r += "\\x";
      r += kHex[u >> 4];
      r += kHex[u & 15];
    }
  }
  return r;
}

std::string refusal(std::string_view variable, std::string_view value, std::string_view accepted) {
  std::string r = "tierrt: ";
  r += variable;
  r += "=\"";
  r += printable(value);
  r += "\" is not accepted; expected ";
  r += accepted;
  return r;
}

std::string normalized(std::string_view value) {
  std::string r = trim(value);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

std::uint64_t ByteSize::resolve(std::uint64_t whole) const noexcept {
  if (!relative) return bytes;
  const long double v = static_cast<long double>(whole) * fraction;
  return static_cast<std::uint64_t>(v);
}

std::optional<ByteSize> parse_byte_size(std::string_view variable,
                                        std::string_view value,
                                        bool allow_percent, std::string* error) {
  const std::string accepted =
      allow_percent ? std::string(kByteForms) + ", or a percentage in (0, 100] like 90%"
                    : std::string(kByteForms);
  const std::string s = trim(value);
  // Number: digits with at most one '.', no sign, no exponent.
  std::size_t i = 0;
  bool dot = false, digits = false;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) ||
                          (s[i] == '.' && !dot))) {
    if (s[i] == '.') dot = true; else digits = true;
    ++i;
  }
  if (!digits) {
    set_error(error, variable, value, accepted);
    return std::nullopt;
  }
  const std::string num = s.substr(0, i);
  const std::string unit = normalized(std::string_view(s).substr(i));
  const long double x = std::strtold(num.c_str(), nullptr);

  if (unit == "%") {
    if (!allow_percent || !(x > 0) || x > 100) {
      set_error(error, variable, value, accepted);
      return std::nullopt;
    }
    ByteSize b;
    b.relative = true;
    b.fraction = static_cast<double>(x / 100);
    return b;
  }
  long double mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1024.0L;
  else if (unit == "m" || unit == "mib") mult = 1024.0L * 1024;
  else if (unit == "g" || unit == "gib") mult = 1024.0L * 1024 * 1024;
  else if (unit == "t" || unit == "tib") mult = 1024.0L * 1024 * 1024 * 1024;
  else if (unit == "kb") mult = 1e3L;
  else if (unit == "mb") mult = 1e6L;
  else if (unit == "gb") mult = 1e9L;
  else if (unit == "tb") mult = 1e12L;
  const long double v = x * mult;
  // Whole bytes only, and within 2^63.
  if (mult == 0 || v != std::floor(v) || v >= 9.2e18L) {
    set_error(error, variable, value, accepted);
    return std::nullopt;
  }
  return ByteSize::absolute(static_cast<std::uint64_t>(v));
}

std::optional<int> parse_choice(std::string_view variable, std::string_view value,
                                std::initializer_list<std::string_view> choices,
                                std::string* error) {
  const std::string v = normalized(value);
  int k = 0;
  std::string accepted = "one of ";
  for (std::string_view c : choices) {
    if (v == normalized(c)) return k;
    if (k) accepted += ", ";
    accepted += c;
    ++k;
  }
  set_error(error, variable, value, accepted);
  return std::nullopt;
}

std::string expand_output_path(std::string_view pattern, GetenvFn getenv_fn) {
  std::string out;
  std::optional<RankInfo> rank;  // read at the first %r or %l
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (pattern[i] != '%' || std::string_view("prlh%").find(next) == std::string_view::npos) {
      out += pattern[i];
      continue;
    }
    ++i;
    if (next == '%') {
      out += '%';
    } else if (next == 'p') {
      out += std::to_string(getpid());
    } else if (next == 'h') {
      out += short_hostname();
    } else {
      if (!rank) rank = read_rank(getenv_fn);
      const int x = next == 'r' ? rank->rank : rank->local_rank;
      out += std::to_string(x < 0 ? 0 : x);
    }
  }
  return out;
}

std::string device_output_path(std::string_view pattern, int device, bool mark) {
  if (pattern.empty() || pattern == "-") return std::string(pattern);
  std::string out;
  bool named = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (pattern[i] == '%' && next == 'd') {
      out += std::to_string(device);
      named = true;
      ++i;
    } else if (pattern[i] == '%' && next == '%') {
      out += "%%";  // expand_output_path's to unescape
      ++i;
    } else {
      out += pattern[i];
    }
  }
  if (named || !mark) return out;
  const std::size_t name = out.rfind('/') == std::string::npos ? 0 : out.rfind('/') + 1;
  std::size_t dot = out.rfind('.');
  if (dot == std::string::npos || dot <= name) dot = out.size();  // no extension (or a dot file)
  out.insert(dot, ".dev" + std::to_string(device));
  return out;
}

}  // namespace tierrt::config
