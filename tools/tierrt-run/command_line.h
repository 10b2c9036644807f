// tierrt-run's command line: its options, the TIERRT_* variables they become,
// and where the command starts. Parsed by hand rather than by a generic
// parser, because the rule for output files (below) depends on whether a
// `--` comes later on the line, which generic parsers do not look at.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tierrt::run {

struct CommandLine {
  // The variables the options set, in the order given (a later value of the
  // same option replaces the earlier one).
  std::vector<std::pair<std::string, std::string>> variables;
  std::string framework;  // "", "torch" or "jax"
  bool help = false;
  bool version = false;
  bool print_env = false;
  bool estimate = false;  // --estimate: observe, record, then model (estimate.h)
  std::vector<std::string> command;
};

// Parses argv[1..argc). Returns false and sets *error (one line, naming the
// option) when an option is unknown, lacks its value or has a bad one.
bool parse_command_line(int argc, const char* const* argv, CommandLine* out, std::string* error);

// The --help text.
std::string usage();

}  // namespace tierrt::run
