#include "options.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace trainer {

namespace {

constexpr const char* kUsage =
    "usage: trainer [key=value ...]\n"
    "Trains a multilayer perceptron (ReLU layers of equal width, mean squared error, Adam) on a\n"
    "synthetic data set, on the CUDA driver API, and prints the loss of each step.\n"
    "  layers=N      layers (default 12)\n"
    "  width=N       features per layer (default 32)\n"
    "  batch=N       rows per batch (default 16384)\n"
    "  steps=N       training steps (default 8)\n"
    "  seed=N        seed of the weights and the data (default 1)\n"
    "  lr=X          Adam's learning rate (default 0.001)\n"
    "  mark-steps=1  call tierrt_mark_step after each step when tierrt is loaded (default 0)\n"
    "  launch-blocking=1  wait for each kernel before going on (default 0: the host runs ahead)\n"
    "  kernel-us=N   on simdev, the modeled time of the cheapest kernel in microseconds; the\n"
    "                matrix products take twice as long (default 1500; 0: as long as they compute)\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "trainer: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

uint64_t parse_unsigned(std::string_view key, const std::string& value, uint64_t min, uint64_t max) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || value[0] == '-' || *end || errno || v < min || v > max)
    usage_error(std::string(key) + "=" + value + ": expected a whole number from " + std::to_string(min) + " to " +
                std::to_string(max));
  return v;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "help" || arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    const size_t eq = arg.find('=');
    if (eq == std::string_view::npos) usage_error("expected key=value, got " + std::string(arg));
    const std::string_view key = arg.substr(0, eq);
    const std::string value(arg.substr(eq + 1));
    if (key == "layers") {
      o.layers = static_cast<unsigned>(parse_unsigned(key, value, 1, 1024));
    } else if (key == "width") {
      o.width = static_cast<unsigned>(parse_unsigned(key, value, 1, 65536));
    } else if (key == "batch") {
      o.batch = static_cast<unsigned>(parse_unsigned(key, value, 1, 1u << 24));
    } else if (key == "steps") {
      o.steps = static_cast<unsigned>(parse_unsigned(key, value, 1, 1000000));
    } else if (key == "seed") {
      o.seed = parse_unsigned(key, value, 0, UINT64_MAX);
    } else if (key == "lr") {
      char* end = nullptr;
      o.lr = std::strtof(value.c_str(), &end);
      if (value.empty() || *end || !(o.lr > 0.0f)) usage_error("lr=" + value + ": expected a positive number");
    } else if (key == "mark-steps") {
      o.mark_steps = parse_unsigned(key, value, 0, 1) == 1;
    } else if (key == "launch-blocking") {
      o.launch_blocking = parse_unsigned(key, value, 0, 1) == 1;
    } else if (key == "kernel-us") {
      o.kernel_us = static_cast<unsigned>(parse_unsigned(key, value, 0, 1000000));
    } else {
      usage_error("unknown setting " + std::string(key));
    }
  }
  if (static_cast<uint64_t>(o.batch) * o.width > UINT32_MAX / 2) usage_error("batch * width is too large");
  return o;
}

}  // namespace trainer
