// tierrt-replay: synthesize transformer training steps, or read a recorded trace,
// and compare tierrt's planner with its baselines in the discrete-event model.
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "policies/eval/measured_link.hpp"
#include "policies/eval/policy_comparison.hpp"
#include "policies/eval/trace_steps.hpp"
#include "policies/eval/transformer_synth.hpp"
#include "policies/trace/trace_file.hpp"
#include "replay_args.hpp"
#include "replay_report.hpp"
#include "residency_svg.hpp"
#include "text_format.hpp"

namespace {

using namespace tierrt;

std::string describe(const policy::SynthOptions& s) {
  std::string d = s.model.name + ", seq " + std::to_string(s.shape.seq) + ", micro-batch " +
                  std::to_string(s.shape.micro_batch) + ", tp " + std::to_string(s.shape.tp);
  if (s.shape.grad_accum > 1) d += ", grad-accum " + std::to_string(s.shape.grad_accum);
  if (s.step_markers) d += ", step markers";
  d += " (synthesized, " + std::to_string(static_cast<int>(s.shape.tflops)) + " TFLOP/s";
  if (s.noise_transients > 0 || s.reorder_probability > 0 || s.duration_jitter > 0)
    d += "; noise: " + std::to_string(s.noise_transients) + " temporaries, reorder " +
         replay::format_number("%.2f", s.reorder_probability) + ", jitter " + replay::format_number("%.2f", s.duration_jitter) + ", seed " +
         std::to_string(s.seed);
  return d + ")";
}

std::string describe_budget(const policy::BudgetChoice& b, const policy::Comparison& c) {
  if (b.bytes) return "given";
  // Named by what tierrt actually moved: the planner spills only activations whose
  // idle gap allows it, which is not every activation.
  if (b.offload_all)
    return "the peak tierrt reaches spilling every activation it can (" +
           std::to_string(static_cast<int>(100 * c.offload_all_activation_off.value_or(0) + 0.5)) +
           "% of the activation bytes moved)";
  return "forces " + std::to_string(static_cast<int>(b.offload_fraction * 100 + 0.5)) +
         "% of the activation bytes live at the peak off HBM";
}

template <class Write>
void write_file(const std::string& path, Write write) {
  std::ofstream f(path, std::ios::trunc);
  if (!f) throw replay::ArgError(path + ": cannot open for writing");
  write(f);
  if (!f) throw replay::ArgError(path + ": write failed");
}

// A recorded trace carries the copy rates the run measured. Without --link they
// are the link (for the model and the planner alike); with it, they are dropped
// so that the planner plans for the link being modeled.
void settle_link(policy::Trace& trace, replay::Args& a) {
  if (a.link_given) {
    std::erase_if(trace, [](const policy::Event& e) { return e.kind == policy::EventKind::CopyRate; });
    return;
  }
  if (auto measured = policy::measured_link(trace, a.link)) a.link = *measured;
}

// Figures for a step that is not one would read as results: none rather than wrong ones.
void require_step(const policy::TraceSteps& analysed) {
  if (!analysed.no_step.empty())
    throw std::runtime_error("no training step found (" + analysed.no_step + "): no figures reported");
}

int run_replay(replay::Args a) {
  policy::Trace trace = a.trace_path ? policy::read_trace_file(*a.trace_path) : policy::synthesize(*a.synth);
  settle_link(trace, a);
  const auto analysed = policy::analyse_trace(trace);
  require_step(analysed);
  std::vector<std::string> skipped;
  const auto cmp = policy::compare_policies(analysed.steps, a.policies, a.link, a.budget, a.svg_path.has_value(), &skipped);
  replay::ReportContext ctx{a.trace_path ? *a.trace_path + " (recorded)" : describe(*a.synth),
                            policy::describe_link(a.link), describe_budget(a.budget, cmp), analysed.steps.size()};
  replay::print_table(std::cout, ctx, cmp);
  for (const auto& s : skipped) std::cout << "skipped " << s << "\n";
  if (a.csv_path)
    write_file(*a.csv_path, [&](std::ostream& o) {
      replay::write_csv_header(o);
      replay::write_csv_rows(o, ctx, cmp);
    });
  if (a.svg_path) write_file(*a.svg_path, [&](std::ostream& o) { replay::write_residency_svg(o, ctx, cmp); });
  return 0;
}

int run_shipped(const replay::Args& a) {
  std::ofstream csv;
  if (a.csv_path) {
    csv.open(*a.csv_path, std::ios::trunc);
    if (!csv) throw replay::ArgError(*a.csv_path + ": cannot open for writing");
    replay::write_csv_header(csv);
  }
  for (const auto& name : policy::model_names()) {
    policy::SynthOptions s;
    s.model = *policy::find_model(name);
    s.shape = policy::default_shape(s.model);
    const auto analysed = policy::analyse_trace(policy::synthesize(s));
    require_step(analysed);
    const auto cmp = policy::compare_policies(analysed.steps, a.policies, a.link, a.budget, false);
    replay::ReportContext ctx{describe(s), policy::describe_link(a.link), describe_budget(a.budget, cmp),
                              analysed.steps.size()};
    replay::print_table(std::cout, ctx, cmp);
    std::cout << "\n";
    if (csv.is_open()) replay::write_csv_rows(csv, ctx, cmp);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto a = replay::parse_args(std::vector<std::string>(argv + 1, argv + argc));
    switch (a.command) {
      case replay::Command::Help:
        std::cout << replay::usage();
        return 0;
      case replay::Command::Synth: {
        const auto trace = policy::synthesize(*a.synth);
        policy::write_trace_file(a.out_path, trace);
        std::cout << a.out_path << ": " << trace.size() << " events, " << describe(*a.synth) << "\n";
        return 0;
      }
      case replay::Command::Replay:
        return run_replay(a);
      case replay::Command::Shipped:
        return run_shipped(a);
    }
  } catch (const replay::ArgError& e) {
    std::cerr << "tierrt-replay: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tierrt-replay: " << replay::one_line(e.what()) << "\n";
    return 1;
  }
  return 0;
}
