#include "command_line.h"

#include <algorithm>
#include <initializer_list>
#include <stdexcept>
#include <string_view>

#include "policies/link_model.hpp"
#include "runtime/config.h"

namespace tierrt::run {

namespace {

// How an option takes its value.
enum class Takes {
  Nothing,
  Value,       // --opt VALUE or --opt=VALUE
  OutputFile,  // --opt=FILE, or --opt FILE before a `--` (see usage())
};

enum class Check { None, Size, SizeOrPercent, Choice, Link };

struct Option {
  std::string_view name;
  Takes takes;
  const char* variable;  // the TIERRT_* variable it sets; null for the others
  Check check;
  std::initializer_list<std::string_view> choices;
  const char* metavar;
  const char* help;
};

const Option kOptions[] = {
    {"--budget", Takes::Value, "TIERRT_DEVICE_BUDGET", Check::SizeOrPercent, {}, "SIZE",
     "device memory tierrt may use, e.g. 60GiB or 90% (TIERRT_DEVICE_BUDGET)"},
    {"--host-budget", Takes::Value, "TIERRT_HOST_BUDGET", Check::SizeOrPercent, {}, "SIZE",
     "pinned host memory for spilled blocks, e.g. 64GiB or 50% (TIERRT_HOST_BUDGET)"},
    {"--mode", Takes::Value, "TIERRT_MODE", Check::Choice, {"off", "observe", "tier"}, "MODE",
     "off | observe | tier (TIERRT_MODE; default tier)"},
    {"--policy", Takes::Value, "TIERRT_POLICY", Check::Choice, {"planner", "reactive"}, "POLICY",
     "planner | reactive (TIERRT_POLICY; default planner)"},
    {"--spill-mode", Takes::Value, "TIERRT_SPILL_MODE", Check::Choice, {"auto", "remap", "copy"}, "MODE",
     "auto | remap | copy (TIERRT_SPILL_MODE; default auto)"},
    {"--link", Takes::Value, "TIERRT_LINK", Check::Link, {}, "LINK",
     "the host link the planner assumes until it measures one: pcie5, c2c, or H2D,D2H in GB/s (TIERRT_LINK)"},
    {"--min-bytes", Takes::Value, "TIERRT_MIN_BYTES", Check::Size, {}, "SIZE",
     "smallest allocation tierrt tiers (TIERRT_MIN_BYTES; default 1MiB)"},
    {"--log", Takes::Value, "TIERRT_LOG", Check::Choice, {"off", "error", "warn", "info", "debug"}, "LEVEL",
     "off | error | warn | info | debug (TIERRT_LOG; default warn)"},
    {"--stats", Takes::OutputFile, "TIERRT_STATS", Check::None, {}, "=FILE | --stats",
     "write a summary at exit, to stderr or to FILE (TIERRT_STATS)"},
    {"--trace", Takes::OutputFile, "TIERRT_TRACE", Check::None, {}, "=FILE",
     "write a Chrome/Perfetto trace to FILE (TIERRT_TRACE)"},
    {"--record", Takes::OutputFile, "TIERRT_RECORD", Check::None, {}, "=FILE",
     "record the event stream to FILE, for tierrt-replay (TIERRT_RECORD)"},
    {"--framework", Takes::Value, nullptr, Check::Choice, {"torch", "jax"}, "NAME",
     "apply a framework's settings: torch (PYTORCH_NO_CUDA_MEMORY_CACHING=1), jax "
     "(XLA_PYTHON_CLIENT_ALLOCATOR=platform, XLA_PYTHON_CLIENT_PREALLOCATE=false)"},
    {"--estimate", Takes::Nothing, nullptr, Check::None, {}, "",
     "run CMD untouched (observe mode), then print the planner's estimate of peak device memory and step time at "
     "a few budgets"},
    {"--print-env", Takes::Nothing, nullptr, Check::None, {}, "",
     "print the variables tierrt-run would set (LD_PRELOAD and TIERRT_*) and exit"},
    {"--version", Takes::Nothing, nullptr, Check::None, {}, "", "print the version and exit"},
    {"--help", Takes::Nothing, nullptr, Check::None, {}, "", "print this help and exit"},
};

const Option* find_option(std::string_view name) {
  if (name == "-h") name = "--help";
  for (const Option& o : kOptions)
    if (o.name == name) return &o;
  return nullptr;
}

// A word an output option may take as its file: anything but another option
// (a lone "-" is stderr, not an option).
bool may_be_a_file(std::string_view word) { return word == "-" || !word.starts_with("-"); }

bool checked(const Option& o, std::string_view value, std::string* error) {
  switch (o.check) {
    case Check::None: return true;
    case Check::Size: return config::parse_byte_size(o.name, value, false, error).has_value();
    case Check::SizeOrPercent: return config::parse_byte_size(o.name, value, true, error).has_value();
    case Check::Choice: return config::parse_choice(o.name, value, o.choices, error).has_value();
    case Check::Link:
      try {
        (void)policy::parse_link(config::normalized(value));
        return true;
      } catch (const std::invalid_argument&) {
        *error = config::refusal(o.name, value, "pcie5, c2c, or H2D,D2H in GB/s (e.g. 100,80)");
        return false;
      }
  }
  return false;
}

void set(CommandLine* out, const char* variable, std::string value) {
  auto it = std::find_if(out->variables.begin(), out->variables.end(),
                         [&](const auto& v) { return v.first == variable; });
  if (it != out->variables.end()) it->second = std::move(value);
  else out->variables.emplace_back(variable, std::move(value));
}

}  // namespace

bool parse_command_line(int argc, const char* const* argv, CommandLine* out, std::string* error) {
  const std::vector<std::string_view> words(argv + 1, argv + argc);
  const auto separator = std::find(words.begin(), words.end(), "--");
  std::size_t i = 0;
  for (; i < words.size(); ++i) {
    const std::string_view word = words[i];
    if (word == "--") {
      ++i;
      break;
    }
    if (may_be_a_file(word)) break;  // the first bare word starts the command
    const std::size_t eq = word.find('=');
    const Option* o = find_option(word.substr(0, eq));
    if (!o) {
      *error = "tierrt-run: unknown option " + std::string(word.substr(0, eq)) + " (see --help)";
      return false;
    }
    const bool joined = eq != std::string_view::npos;
    std::string value;
    if (o->takes == Takes::Nothing) {
      if (joined) {
        *error = "tierrt-run: " + std::string(o->name) + " takes no value";
        return false;
      }
    } else if (joined) {
      value = word.substr(eq + 1);
    } else if (o->takes == Takes::Value && i + 1 < words.size() && words[i + 1] != "--") {
      value = words[++i];
    } else if (o->takes == Takes::OutputFile && separator != words.end() &&
               words.begin() + static_cast<std::ptrdiff_t>(i) + 1 < separator && may_be_a_file(words[i + 1])) {
      value = words[++i];
    }
    if (o->takes != Takes::Nothing && value.empty() && o->name != "--stats") {
      *error = "tierrt-run: " + std::string(o->name) + " needs a value: " + std::string(o->name) +
               (o->takes == Takes::OutputFile ? "=FILE" : "=" + std::string(o->metavar));
      return false;
    }
    if (!checked(*o, value, error)) return false;
    if (o->name == "--help") out->help = true;
    else if (o->name == "--version") out->version = true;
    else if (o->name == "--print-env") out->print_env = true;
    else if (o->name == "--estimate") out->estimate = true;
    else if (o->name == "--framework") out->framework = value;
    else set(out, o->variable, value.empty() ? "-" : value);
  }
  out->command.assign(words.begin() + static_cast<std::ptrdiff_t>(std::min(i, words.size())), words.end());
  if (out->command.empty() && !out->help && !out->version && !out->print_env) {
    *error = "tierrt-run: no command given (tierrt-run [options] -- CMD ARGS...; see --help)";
    return false;
  }
  return true;
}

std::string usage() {
  std::string u =
      "Usage: tierrt-run [options] [--] CMD ARGS...\n"
      "Runs CMD with tierrt preloaded: its large device allocations become tiered blocks that spill to pinned host\n"
      "memory while idle and come back before they are used. Options set TIERRT_* variables for CMD; variables\n"
      "already in the environment are kept unless an option overrides them.\n\n"
      "Options:\n";
  for (const Option& o : kOptions) {
    std::string head = "  ";
    head += o.name;
    if (*o.metavar) {
      if (o.metavar[0] != '=') head += ' ';
      head += o.metavar;
    }
    head.resize(std::max<std::size_t>(head.size() + 1, 26), ' ');
    u += head + o.help + "\n";
  }
  u +=
      "\n"
      "Where the command starts: after `--`, or else at the first word that is not an option or an option's value.\n"
      "Output files (--stats, --trace, --record): write --stats=FILE. The form --stats FILE is taken only when a `--`\n"
      "follows later on the line; without one, the word after --stats starts the command (--stats PROG runs PROG\n"
      "with the summary on stderr). --stats alone writes to stderr; --trace and --record need a FILE. A FILE of `-`\n"
      "is stderr. In file names %p becomes the process id and %r the rank (RANK, SLURM_PROCID or\n"
      "OMPI_COMM_WORLD_RANK; 0 when none is set), so that forked children and ranks write files of their own.\n\n"
      "Sizes take B, KiB, MiB, GiB, TiB (KB, MB, GB, TB are powers of 1000); --budget and --host-budget also take\n"
      "a percentage of the device's or the host's memory.\n\n"
      "The library: $TIERRT_LIBRARY, else libtierrt.so in the lib folder beside this program's bin folder, else the\n"
      "build this program came from. It is checked (it exists, loads, exports tierrt's API) before CMD runs.\n\n"
      "--estimate runs CMD in observe mode (nothing moves) with its events recorded (to the --record file, else to a\n"
      "temporary file), and at its end models the recorded steps at budgets that take 25%, 50%, 75% and 100% of the\n"
      "activation bytes live at the peak off the device: tierrt's planner against no offload. The link is the one\n"
      "the run measured, else --link / TIERRT_LINK, else pcie5. Every figure it prints is modeled, not measured.\n\n"
      "Exit status: CMD's; 2 for a bad option or an unusable library; 127 when CMD cannot be run.\n\n"
      "Examples:\n"
      "  tierrt-run --budget 60GiB --stats -- python train.py\n"
      "  tierrt-run --budget=90% --stats=stats.%r.txt --framework jax python train_jax.py\n"
      "  tierrt-run --estimate --link=pcie5 -- python train.py\n";
  return u;
}

}  // namespace tierrt::run
