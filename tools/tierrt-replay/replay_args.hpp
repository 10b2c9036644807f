// Command line of tierrt-replay. Bad arguments become one-line errors (ArgError).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "policies/eval/policy_comparison.hpp"
#include "policies/eval/transformer_synth.hpp"
#include "policies/link_model.hpp"
#include "text_format.hpp"

namespace tierrt::replay {

// One line whatever the arguments hold (see one_line).
class ArgError : public std::runtime_error {
 public:
  explicit ArgError(const std::string& what) : std::runtime_error(one_line(what)) {}
};

enum class Command { Help, Synth, Replay, Shipped };

struct Args {
  Command command = Command::Help;
  std::optional<std::string> trace_path;  // replay: a trace file
  std::optional<policy::SynthOptions> synth;  // synth, or replay of a synthesized step
  std::string out_path;                   // synth: where the trace goes
  policy::LinkModel link;
  bool link_given = false;  // --link was passed (else a recorded trace's measured rates win)
  policy::BudgetChoice budget;
  std::vector<std::string> policies;
  std::optional<std::string> csv_path, svg_path;
};

Args parse_args(const std::vector<std::string>& argv);
const char* usage();

}  // namespace tierrt::replay
