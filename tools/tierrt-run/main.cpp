// tierrt-run: runs a command with tierrt preloaded and configured.
//   tierrt-run [options] -- CMD ARGS...
// Sets LD_PRELOAD (ahead of whatever is already there, sanitizer runtimes
// aside) and the TIERRT_* variables the options name, applies framework
// presets, then becomes the command, so its exit status is the command's own.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config.h"

namespace {

namespace fs = std::filesystem;

// libtierrt.so: $TIERRT_LIBRARY, else beside this program in an installed
// tree (../lib*/), else where the build put it.
std::string find_library(const char* argv0) {
  if (const char* v = std::getenv("TIERRT_LIBRARY"); v && *v) return v;
  std::error_code ec;
  fs::path self = fs::canonical("/proc/self/exe", ec);
  if (ec) self = fs::absolute(argv0);
  for (const char* rel : {"../lib/libtierrt.so", "../lib64/libtierrt.so", "../lib/x86_64-linux-gnu/libtierrt.so",
                          "../lib/aarch64-linux-gnu/libtierrt.so"}) {
    fs::path p = self.parent_path() / rel;
    if (fs::exists(p, ec)) return fs::canonical(p, ec).string();
  }
  if (fs::exists(TIERRT_BUILD_LIBRARY, ec)) return TIERRT_BUILD_LIBRARY;
  return {};
}

// Sets a variable unless the user already chose a value for it.
void preset(const char* name, const char* value) { setenv(name, value, 0); }

bool is_sanitizer_runtime(std::string_view path) {
  const std::string_view file = path.substr(path.rfind('/') + 1);
  for (std::string_view rt : {"libasan.", "libtsan.", "liblsan.", "libubsan.", "libhwasan.", "libclang_rt."})
    if (file.starts_with(rt)) return true;
  return false;
}

// LD_PRELOAD with `lib` ahead of what is there, except sanitizer runtimes at
// its head: they stay first, since ASan refuses to start a program whose
// initial libraries do not begin with it.
std::string preload_with(const std::string& lib, const char* existing) {
  std::string_view rest = existing ? existing : "";
  std::string head;
  while (!rest.empty()) {
    const std::size_t end = rest.find(':');
    const std::string_view entry = rest.substr(0, end);
    if (!is_sanitizer_runtime(entry)) break;
    head.append(entry).append(":");
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
  }
  return rest.empty() ? head + lib : head + lib + ":" + std::string(rest);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Runs CMD with tierrt preloaded: its large device allocations become tiered blocks that spill to pinned host "
      "memory while idle and come back before they are used. Options set TIERRT_* variables for CMD; variables "
      "already in the environment are kept unless an option overrides them. Exit status: CMD's, or 2 for a bad "
      "option, 127 when CMD cannot be run.",
      "tierrt-run"};
  app.footer(
      "Examples:\n"
      "  tierrt-run --budget 60GiB --stats -- python train.py\n"
      "  tierrt-run --framework jax --budget 90% -- python train_jax.py\n"
      "Sizes take B, KiB, MiB, GiB, TiB (KB, MB, GB, TB are powers of 1000); --budget also takes a percentage "
      "of the device's memory.");
  std::string budget, host_budget, mode, stats, trace, framework;
  app.add_option("--budget", budget, "device memory tierrt may use (TIERRT_DEVICE_BUDGET), e.g. 60GiB or 90%");
  app.add_option("--host-budget", host_budget, "pinned host memory for spilled blocks (TIERRT_HOST_BUDGET)");
  app.add_option("--mode", mode, "off | observe | tier (TIERRT_MODE; default tier)")
      ->check(CLI::IsMember({"off", "observe", "tier"}));
  app.add_option("--stats", stats, "print a summary at exit, to stderr or to FILE (TIERRT_STATS)")
      ->expected(0, 1)
      ->default_str("-");
  app.add_option("--trace", trace, "write a Chrome/Perfetto trace to FILE (TIERRT_TRACE)");
  app.add_option("--framework", framework,
                 "apply a framework's settings: torch (PYTORCH_NO_CUDA_MEMORY_CACHING=1), jax "
                 "(XLA_PYTHON_CLIENT_ALLOCATOR=platform, XLA_PYTHON_CLIENT_PREALLOCATE=false)")
      ->check(CLI::IsMember({"torch", "jax"}));
  std::vector<std::string> command;
  app.add_option("command", command, "the command to run, after --")->required();
  app.positionals_at_end();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  std::string error;
  if (!budget.empty() && !tierrt::config::parse_byte_size("--budget", budget, true, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  if (!host_budget.empty() && !tierrt::config::parse_byte_size("--host-budget", host_budget, true, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  std::string lib = find_library(argv[0]);
  if (lib.empty()) {
    std::fprintf(stderr, "tierrt-run: cannot find libtierrt.so (set TIERRT_LIBRARY to its path)\n");
    return 2;
  }

  setenv("LD_PRELOAD", preload_with(lib, std::getenv("LD_PRELOAD")).c_str(), 1);
  if (!budget.empty()) setenv("TIERRT_DEVICE_BUDGET", budget.c_str(), 1);
  if (!host_budget.empty()) setenv("TIERRT_HOST_BUDGET", host_budget.c_str(), 1);
  if (!mode.empty()) setenv("TIERRT_MODE", mode.c_str(), 1);
  if (app.count("--stats")) setenv("TIERRT_STATS", stats.empty() ? "-" : stats.c_str(), 1);
  if (!trace.empty()) setenv("TIERRT_TRACE", trace.c_str(), 1);
  if (framework == "torch") {
    // Every tensor then reaches the driver, so tierrt sees (and tiers) each one.
    preset("PYTORCH_NO_CUDA_MEMORY_CACHING", "1");
  } else if (framework == "jax") {
    preset("XLA_PYTHON_CLIENT_ALLOCATOR", "platform");
    preset("XLA_PYTHON_CLIENT_PREALLOCATE", "false");
  }

  std::vector<char*> args;
  for (auto& a : command) args.push_back(a.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "tierrt-run: cannot run %s: %s\n", args[0], std::strerror(errno));
  return 127;
}
