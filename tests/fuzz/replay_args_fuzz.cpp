// tierrt-replay's command line: any arguments (NUL-separated in the input)
// parse into a consistent command or are refused with one ArgError line;
// nothing else escapes. tierrt-run parses its arguments inside main(), so
// this is the command line the fuzzer can reach in-process; tierrt-run's
// values are checked by the same parse_byte_size the settings target drives.
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "fuzz_target.h"
#include "tools/tierrt-replay/replay_args.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  std::vector<std::string> argv;
  while (!in.empty() && argv.size() < 64) argv.push_back(in.take_until('\0'));
  using tierrt::replay::Command;
  try {
    const auto a = tierrt::replay::parse_args(argv);
    switch (a.command) {
      case Command::Help: break;
      case Command::Synth: FUZZ_CHECK(a.synth && !a.out_path.empty() && !a.trace_path); break;
      case Command::Replay: FUZZ_CHECK(a.synth.has_value() != a.trace_path.has_value()); break;
      case Command::Shipped: FUZZ_CHECK(!a.synth && !a.trace_path && !a.budget.bytes); break;
    }
    const int budget_modes = (a.budget.bytes ? 1 : 0) + (a.budget.offload_all ? 1 : 0);
    FUZZ_CHECK(budget_modes <= 1);
    FUZZ_CHECK(a.budget.offload_fraction >= 0 && a.budget.offload_fraction <= 1);
    // Rates from 1 MB/s to 1 PB/s: beyond, the step model's times are 0 or infinite.
    FUZZ_CHECK(a.link.h2d_bytes_per_s >= 1e6 && a.link.h2d_bytes_per_s <= 1e15);
    FUZZ_CHECK(a.link.d2h_bytes_per_s >= 1e6 && a.link.d2h_bytes_per_s <= 1e15);
    if (a.synth) FUZZ_CHECK(a.synth->shape.seq >= 16 && a.synth->steps >= 1);
    // Noise the synthesizer can make: a probability, and durations kept positive.
    if (a.synth) FUZZ_CHECK(a.synth->reorder_probability >= 0 && a.synth->reorder_probability <= 1);
    if (a.synth) FUZZ_CHECK(a.synth->duration_jitter >= 0 && a.synth->duration_jitter < 1);
    if (a.synth) FUZZ_CHECK(a.synth->shape.grad_accum >= 1);
  } catch (const tierrt::replay::ArgError& e) {
    const std::string m = e.what();
    FUZZ_CHECK(!m.empty() && m.find('\n') == std::string::npos);
  }
  return 0;
}
