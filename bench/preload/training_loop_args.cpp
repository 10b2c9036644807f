// training_loop_bench's command line: its own flags, taken out of argv so
// that what is left goes to Google Benchmark.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "training_loop.h"

namespace training_loop {

void die(const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", kProg, why.c_str());
  std::exit(1);
}

namespace {

// One-line rejection naming the flag, as tierrt's settings do.
[[noreturn]] void bad_flag(const std::string& flag, const std::string& value, const std::string& accepted) {
  std::fprintf(stderr, "%s: %s: '%s' is not %s\n", kProg, flag.c_str(), value.c_str(), accepted.c_str());
  std::exit(2);
}

std::uint32_t parse_uint(const std::string& flag, const std::string& v, std::uint32_t lo, std::uint32_t hi) {
  char* end = nullptr;
  unsigned long long x = v.empty() || v[0] == '-' ? 0 : std::strtoull(v.c_str(), &end, 10);
  if (!end || *end || x < lo || x > hi)
    bad_flag(flag, v, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  return static_cast<std::uint32_t>(x);
}

std::vector<std::uint32_t> parse_uint_list(const std::string& flag, const std::string& v, std::uint32_t lo,
                                           std::uint32_t hi) {
  std::vector<std::uint32_t> out;
  std::size_t at = 0;
  do {
    const std::size_t comma = v.find(',', at);
    out.push_back(parse_uint(flag, v.substr(at, comma == std::string::npos ? std::string::npos : comma - at), lo, hi));
    at = comma == std::string::npos ? comma : comma + 1;
  } while (at != std::string::npos);
  return out;
}

double parse_gbps(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(x >= 0.1 && x <= 10000)) bad_flag(flag, v, "a rate in GB/s from 0.1 to 10000");
  return x;
}

constexpr const char* kOwnFlags[] = {"--layers", "--mib",       "--steps",    "--link-gbps",
                                     "--kernel-us", "--libtierrt", "--worker"};

bool own_flag(const std::string& flag) {
  for (const char* f : kOwnFlags)
    if (flag == f) return true;
  return false;
}

}  // namespace

Args parse_args(int* argc, char** argv) {
  Args a;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "--help" || flag == "-h") {
      std::printf("usage: %s [--layers N] [--mib N] [--steps N] [--link-gbps X] [--kernel-us N[,N...]]\n"
                  "       [--libtierrt PATH] [Google Benchmark flags, e.g. --benchmark_repetitions=5]\n",
                  kProg);
      std::exit(0);
    }
    const std::size_t eq = flag.find('=');
    if (!own_flag(flag.substr(0, eq))) {
      argv[kept++] = argv[i];  // Google Benchmark's, or unknown: it says which
      continue;
    }
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    } else if (i + 1 < *argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "%s: %s needs a value\n", kProg, flag.c_str());
      std::exit(2);
    }
    if (flag == "--layers") a.shape.layers = parse_uint(flag, value, 2, 1024);
    else if (flag == "--mib") a.shape.mib = parse_uint(flag, value, 2, 1024);
    else if (flag == "--steps") a.shape.steps = parse_uint(flag, value, kWarmupSteps + 1, 10000);
    else if (flag == "--link-gbps") a.shape.link_gbps = parse_gbps(flag, value);
    else if (flag == "--kernel-us") a.kernel_us = parse_uint_list(flag, value, 1, 10000000);
    else if (flag == "--libtierrt") a.libtierrt = value;
    else a.worker = value;
  }
  a.shape.kernel_us = a.kernel_us.front();
  *argc = kept;
  argv[kept] = nullptr;
  return a;
}

}  // namespace training_loop
