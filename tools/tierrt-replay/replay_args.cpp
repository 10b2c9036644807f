#include "replay_args.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

#include "text_format.hpp"

namespace tierrt::replay {
namespace {

using policy::find_model;
using policy::SynthOptions;

template <class T>
std::string show(T v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

template <class T>
T parse_number(const std::string& flag, const std::string& text, T min, T max) {
  T v{};
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || !(v >= min) || !(v <= max))
    throw ArgError(flag + ": expected a number in [" + show(min) + ", " + show(max) + "], got '" + text + "'");
  return v;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t b = 0;
  for (;;) {
    const std::size_t e = s.find(',', b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) return out;
    b = e + 1;
  }
}

}  // namespace

const char* usage() {
  return R"(tierrt-replay: replay training steps through tierrt's policy engine and its baselines
in a discrete-event model (one compute stream, one D2H and one H2D copy engine, a
device budget). Every figure it prints is modeled, not measured.

usage:
  tierrt-replay synth  --model NAME [shape] [noise] -o FILE
  tierrt-replay replay (--trace FILE | --model NAME [shape] [noise]) [options]
  tierrt-replay shipped [options]        every shipped model at its default shape
  tierrt-replay --help

models: llama3.1-8b, llama3.1-70b, llama3.1-405b, deepseek-v3
shape:
  --seq N            sequence length (default 8192; 4096 for deepseek-v3)
  --micro-batch N    sequences per micro-batch (default 1)
  --tp N             tensor/sequence/expert parallel degree (default 8; 1 for llama3.1-8b)
  --ep N             expert-parallel degree, MoE only (default 64 for deepseek-v3)
  --dp N             data-parallel ranks sharding the optimizer state (default 8)
  --grad-accum K     micro-steps (forward and backward) per optimizer step
                     (default 1); no step markers unless --markers
  --tflops X         sustained dense TFLOP/s per GPU (default 600)
  --steps N          training steps to synthesize (default 3)
  --markers          mark each step's start (as tierrt_mark_step does)
noise (synthesized steps; drawn afresh in every step):
  --temporaries N    N extra random-size short-lived allocations, each with one
                     launch, at each of three points of every layer (default 0)
  --reorder P        probability that two adjacent independent launches (Q/K/V
                     projections, MLP gate/up) swap (default 0)
  --jitter F         each launch's duration scaled by a uniform factor in
                     [1-F, 1+F], F below 1 (default 0)
  --seed S           seed of the noise (default 1)
options:
  --link L           pcie5 (53 GB/s each way), c2c (375 GB/s H2D, 297 GB/s D2H),
                     or H2D,D2H in GB/s (default: the copy rates a recorded
                     trace measured, else pcie5)
  --budget-gib X     device budget in GiB
  --offload-fraction F
                     budget = peak without offload - F x activation bytes at the peak
                     (default 0.5)
  --offload-all      tierrt spills every activation it can; the budget is the peak
                     it reaches (the table says what share of activations moved)
  --policies LIST    comma-separated from none,lru,vdnn,te,jax,save_on_cpu,checkpoint,
                     tierrt (default: all)
  --csv FILE         write the table as CSV
  --svg FILE         plot device memory over the last step, one line per policy
)";
}

Args parse_args(const std::vector<std::string>& argv) {
  Args a;
  a.link = policy::parse_link("pcie5");
  a.policies = policy::policy_names();
  if (argv.empty()) throw ArgError("missing command: synth, replay or shipped (see --help)");
  const std::string& cmd = argv[0];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") return a;
  if (cmd == "synth") a.command = Command::Synth;
  else if (cmd == "replay") a.command = Command::Replay;
  else if (cmd == "shipped") a.command = Command::Shipped;
  else throw ArgError("unknown command '" + cmd + "': expected synth, replay or shipped (see --help)");

  std::optional<std::string> model;
  struct ShapeFlags {
    std::optional<std::uint32_t> seq, micro_batch, tp, ep, dp, grad_accum, steps;
    std::optional<double> tflops;
    std::optional<std::uint32_t> temporaries;
    std::optional<double> reorder, jitter;
    std::optional<std::uint64_t> seed;
    bool any() const {
      return seq || micro_batch || tp || ep || dp || grad_accum || steps || tflops || temporaries || reorder || jitter ||
             seed;
    }
  } shape;
  bool markers = false, have_fraction = false;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& f = argv[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= argv.size()) throw ArgError(f + ": missing value");
      return argv[++i];
    };
    if (f == "--help" || f == "-h") { a.command = Command::Help; return a; }
    else if (f == "--model") model = value();
    else if (f == "--trace") a.trace_path = value();
    else if (f == "-o" || f == "--out") a.out_path = value();
    else if (f == "--seq") shape.seq = parse_number<std::uint32_t>(f, value(), 16, 1u << 20);
    else if (f == "--micro-batch") shape.micro_batch = parse_number<std::uint32_t>(f, value(), 1, 1024);
    else if (f == "--tp") shape.tp = parse_number<std::uint32_t>(f, value(), 1, 1024);
    else if (f == "--ep") shape.ep = parse_number<std::uint32_t>(f, value(), 1, 1024);
    else if (f == "--dp") shape.dp = parse_number<std::uint32_t>(f, value(), 1, 1u << 20);
    else if (f == "--grad-accum") shape.grad_accum = parse_number<std::uint32_t>(f, value(), 1, 64);
    else if (f == "--steps") shape.steps = parse_number<std::uint32_t>(f, value(), 1, 1000);
    else if (f == "--tflops") shape.tflops = parse_number<double>(f, value(), 1e-3, 1e6);
    else if (f == "--markers") markers = true;
    else if (f == "--temporaries") shape.temporaries = parse_number<std::uint32_t>(f, value(), 0, 64);
    else if (f == "--reorder") shape.reorder = parse_number<double>(f, value(), 0.0, 1.0);
    else if (f == "--jitter") shape.jitter = parse_number<double>(f, value(), 0.0, 0.9);
    else if (f == "--seed") shape.seed = parse_number<std::uint64_t>(f, value(), 0, UINT64_MAX);
    else if (f == "--link") {
      try {
        a.link = policy::parse_link(value());
        a.link_given = true;
      } catch (const std::invalid_argument& e) {
        throw ArgError(std::string("--link: ") + e.what());
      }
    } else if (f == "--budget-gib") a.budget.bytes = static_cast<std::uint64_t>(parse_number<double>(f, value(), 1e-6, 1e9) * kGiB);
    else if (f == "--offload-fraction") a.budget.offload_fraction = parse_number<double>(f, value(), 0.0, 1.0), have_fraction = true;
    else if (f == "--offload-all") a.budget.offload_all = true;
    else if (f == "--policies") {
      a.policies = split(value());
      for (const auto& p : a.policies) {
        try {
          (void)policy::make_policy(p);
        } catch (const std::invalid_argument& e) {
          throw ArgError(std::string("--policies: ") + e.what());
        }
      }
    } else if (f == "--csv") a.csv_path = value();
    else if (f == "--svg") a.svg_path = value();
    else throw ArgError("unknown option '" + f + "' (see --help)");
  }
  const int budget_modes = (a.budget.bytes ? 1 : 0) + (have_fraction ? 1 : 0) + (a.budget.offload_all ? 1 : 0);
  if (budget_modes > 1) throw ArgError("--budget-gib, --offload-fraction and --offload-all exclude each other");

  if (a.command == Command::Shipped) {
    if (model || a.trace_path) throw ArgError("shipped: takes no --model or --trace");
    if (a.budget.bytes) throw ArgError("shipped: --budget-gib does not fit every model; use --offload-fraction");
    if (a.svg_path) throw ArgError("shipped: --svg plots one configuration; use replay");
  }
  if (model) {
    auto m = find_model(*model);
    if (!m) throw ArgError("unknown model '" + *model + "': expected llama3.1-8b, llama3.1-70b, llama3.1-405b or deepseek-v3");
    SynthOptions s;
    s.model = *m;
    s.shape = policy::default_shape(*m);
    if (shape.seq) s.shape.seq = *shape.seq;
    if (shape.micro_batch) s.shape.micro_batch = *shape.micro_batch;
    if (shape.tp) s.shape.tp = *shape.tp;
    if (shape.ep) s.shape.ep = *shape.ep;
    if (shape.dp) s.shape.dp = *shape.dp;
    if (shape.grad_accum) s.shape.grad_accum = *shape.grad_accum;
    if (shape.tflops) s.shape.tflops = *shape.tflops;
    if (shape.steps) s.steps = *shape.steps;
    if (shape.temporaries) s.noise_transients = *shape.temporaries;
    if (shape.reorder) s.reorder_probability = *shape.reorder;
    if (shape.jitter) s.duration_jitter = *shape.jitter;
    if (shape.seed) s.seed = *shape.seed;
    s.step_markers = markers;
    a.synth = s;
  } else if (shape.any() || markers) {
    throw ArgError("shape and noise options need --model");
  }
  if (a.command == Command::Synth) {
    if (!a.synth) throw ArgError("synth: --model is required");
    if (a.out_path.empty()) throw ArgError("synth: -o FILE is required");
    if (a.trace_path) throw ArgError("synth: --trace makes no sense here");
  }
  if (a.command == Command::Replay) {
    if (a.synth.has_value() == a.trace_path.has_value()) throw ArgError("replay: give exactly one of --trace FILE or --model NAME");
    if (!a.out_path.empty()) throw ArgError("replay: -o is for synth; use --csv or --svg");
  }
  return a;
}

}  // namespace tierrt::replay
