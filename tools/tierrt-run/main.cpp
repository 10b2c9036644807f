// tierrt-run: runs a command with tierrt preloaded and configured.
//   tierrt-run [options] [--] CMD ARGS...
// Sets LD_PRELOAD (ahead of whatever is already there, sanitizer runtimes
// aside) and the TIERRT_* variables the options name, applies framework
// presets, then becomes the command, so its exit status is the command's own.
// With --estimate it stays: it runs the command, waits, then prints the
// planner's estimate from the command's recording (estimate.h).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "command_line.h"
#include "estimate.h"
#include "library_check.h"
#include "policies/link_model.hpp"
#include "runtime/config.h"

namespace {

using Variables = std::vector<std::pair<std::string, std::string>>;

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

// A framework's settings, each only where the user has not chosen a value.
void add_presets(const std::string& framework, Variables* vars) {
  auto preset = [&](const char* name, const char* value) {
    if (!std::getenv(name)) vars->emplace_back(name, value);
  };
  if (framework == "torch") {
    // Every tensor then reaches the driver, so tierrt sees (and tiers) each one.
    preset("PYTORCH_NO_CUDA_MEMORY_CACHING", "1");
  } else if (framework == "jax") {
    preset("XLA_PYTHON_CLIENT_ALLOCATOR", "platform");
    preset("XLA_PYTHON_CLIENT_PREALLOCATE", "false");
  }
}

// NAME=VALUE, quoted for a POSIX shell where the value needs it.
std::string shell_assignment(const std::string& name, const std::string& value) {
  const bool plain = !value.empty() && value.find_first_not_of(
                                           "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                                           "_-./:%,+@=") == std::string::npos;
  if (plain) return name + "=" + value;
  std::string q = name + "='";
  for (char c : value) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A variable's value as the command will see it: set by an option, else
// inherited; "" when neither.
std::string value_of(const Variables& vars, const char* name) {
  for (const auto& [n, v] : vars)
    if (n == name) return v;
  const char* inherited = std::getenv(name);
  return inherited ? inherited : "";
}

// The link an estimate models when the run measured none: TIERRT_LINK's, else pcie5.
bool estimate_link(const Variables& vars, tierrt::policy::LinkModel* link, bool* given, std::string* error) {
  const std::string spec = value_of(vars, "TIERRT_LINK");
  *given = !spec.empty();
  try {
    *link = tierrt::policy::parse_link(*given ? tierrt::config::normalized(spec) : "pcie5");
    return true;
  } catch (const std::invalid_argument&) {
    *error = tierrt::config::refusal("TIERRT_LINK", spec, "pcie5, c2c, or H2D,D2H in GB/s (e.g. 100,80)");
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], tierrt::run::kCheckLibraryFlag) == 0)
    return tierrt::run::check_preloaded_library(argv[2]);
  tierrt::run::CommandLine cl;
  std::string error;
  if (!tierrt::run::parse_command_line(argc, argv, &cl, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  if (cl.help) {
    std::fputs(tierrt::run::usage().c_str(), stdout);
    return 0;
  }
  if (cl.version) {
    std::printf("tierrt-run %s\n", TIERRT_VERSION);
    return 0;
  }

  const std::string lib = tierrt::run::find_library();
  if (lib.empty()) {
    std::fprintf(stderr, "tierrt-run: cannot find libtierrt.so (set TIERRT_LIBRARY to its path)\n");
    return 2;
  }
  const std::string ld_preload = preload_with(lib, std::getenv("LD_PRELOAD"));
  if (const std::string why = tierrt::run::check_library(lib, ld_preload); !why.empty()) {
    std::fprintf(stderr, "tierrt-run: %s%s\n", std::getenv("TIERRT_LIBRARY") ? "TIERRT_LIBRARY=" : "", why.c_str());
    return 2;
  }

  Variables vars = cl.variables;
  vars.emplace(vars.begin(), "LD_PRELOAD", ld_preload);
  add_presets(cl.framework, &vars);
  std::string recording, temporary;
  tierrt::policy::LinkModel link;
  bool link_given = false;
  if (cl.estimate) {
    if (!estimate_link(vars, &link, &link_given, &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 2;
    }
    recording = value_of(vars, "TIERRT_RECORD");
    if (recording.empty() || recording == "-") {
      temporary = cl.print_env ? "/tmp/tierrt-estimate-XXXXXX" : tierrt::run::temporary_recording(&error);
      if (temporary.empty()) {
        std::fprintf(stderr, "%s\n", error.c_str());
        return 2;
      }
      recording = temporary;
    }
    if (!tierrt::run::estimate_variables(&vars, recording, &error)) {
      if (!cl.print_env && !temporary.empty()) unlink(temporary.c_str());
      std::fprintf(stderr, "%s\n", error.c_str());
      return 2;
    }
  }
  if (cl.print_env) {
    for (const auto& [name, value] : vars) std::printf("%s\n", shell_assignment(name, value).c_str());
    return 0;
  }
  for (const auto& [name, value] : vars) setenv(name.c_str(), value.c_str(), 1);

  if (cl.estimate) {
    const int status = tierrt::run::run_and_wait(cl.command);
    if (status != 127) {
      std::fflush(stdout);
      (void)tierrt::run::print_estimate(recording, link, link_given, std::cerr, std::cerr);
    }
    if (!temporary.empty()) unlink(temporary.c_str());
    return status;
  }

  std::vector<char*> args;
  for (std::string& a : cl.command) args.push_back(a.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "tierrt-run: cannot run %s: %s\n", args[0], std::strerror(errno));
  return 127;
}
