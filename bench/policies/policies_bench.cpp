// Policy engine benchmarks: planner time per step for the shipped configurations
// (the acceptance limit is 50 ms for a 405B-scale step with at least 3000
// activations), trace analysis and replay throughput in events per second, and the
// planner against the baselines in the step model, and what recording a
// first step's events costs the policy thread. Counters named modeled_* are
// figures of the model, not measurements.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>

#include "policies/eval/policy_comparison.hpp"
#include "policies/eval/replay.hpp"
#include "policies/eval/trace_steps.hpp"
#include "policies/eval/transformer_synth.hpp"
#include "policies/event_buffer.hpp"
#include "policies/planner.hpp"
#include "policies/policy_engine.hpp"

namespace {

using namespace tierrt::policy;

struct Config {
  const char* model;
  std::uint32_t grad_accum;
};

// 405B with two micro-batches per step: 126 layers and over 3000 activations.
constexpr Config kConfigs[] = {{"llama3.1-8b", 1}, {"llama3.1-70b", 1}, {"llama3.1-405b", 2}, {"deepseek-v3", 1}};

struct Prepared {
  Trace trace;
  TraceSteps steps;
  std::uint64_t budget = 0;
};

const Prepared& prepared(std::size_t i) {
  static std::map<std::size_t, std::unique_ptr<Prepared>> cache;
  auto& slot = cache[i];
  if (!slot) {
    slot = std::make_unique<Prepared>();
    SynthOptions o;
    o.model = *find_model(kConfigs[i].model);
    o.shape = default_shape(o.model);
    o.shape.grad_accum = kConfigs[i].grad_accum;
    o.steps = 2;
    slot->trace = synthesize(o);
    slot->steps = analyse_trace(slot->trace);
    // Half the activation bytes at the peak off HBM, as tierrt-replay's default.
    const auto& tl = slot->steps.steps.back();
    const auto profile = tl.resident_profile();
    std::uint32_t peak = 0;
    for (std::uint32_t k = 0; k < profile.size(); ++k)
      if (profile[k] > profile[peak]) peak = k;
    std::uint64_t act = 0;
    for (const auto& b : tl.blocks)
      if (b.cls == LifetimeClass::Activation && b.alloc_op <= peak && (b.free_op == kNever || peak < b.free_op))
        act += b.bytes;
    slot->budget = profile[peak] - act / 2;
  }
  return *slot;
}

void PlanStep(benchmark::State& state) {
  const auto& p = prepared(static_cast<std::size_t>(state.range(0)));
  const auto& tl = p.steps.steps.back();
  const auto link = parse_link("pcie5");
  std::size_t activations = 0;
  for (const auto& b : tl.blocks) activations += b.cls == LifetimeClass::Activation;
  PlanResult r;
  for (auto _ : state) {
    r = plan_step(tl, p.budget, link, {});
    benchmark::DoNotOptimize(r);
  }
  state.SetLabel(kConfigs[state.range(0)].model);
  state.counters["launches"] = static_cast<double>(tl.ops.size());
  state.counters["activations"] = static_cast<double>(activations);
  state.counters["spilled"] = static_cast<double>(r.spilled.size());
  state.counters["modeled_stall_ms"] = r.modeled.stall_ns / 1e6;
}
BENCHMARK(PlanStep)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

void AnalyseTrace(benchmark::State& state) {
  const auto& p = prepared(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(analyse_trace(p.trace));
  state.SetLabel(kConfigs[state.range(0)].model);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * p.trace.size()));  // events/s
}
BENCHMARK(AnalyseTrace)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

void ReplayPolicy(benchmark::State& state) {
  const auto& p = prepared(1);  // llama3.1-70b
  const auto names = policy_names();
  const std::string name = names[static_cast<std::size_t>(state.range(0))];
  const auto link = parse_link("pcie5");
  ReplayRun run;
  for (auto _ : state) {
    auto policy = make_policy(name);
    const std::uint64_t budget = policy->respects_budget() ? p.budget : std::numeric_limits<std::uint64_t>::max();
    run = replay(p.steps.steps, *policy, ReplayOptions{budget, link, false});
    benchmark::DoNotOptimize(run);
  }
  state.SetLabel("llama3.1-70b " + name);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * p.trace.size()));  // events/s
  const auto& s = run.steps.back();
  state.counters["modeled_step_ms"] = s.step_ns / 1e6;
  // Over the recorded step's compute: a recomputing policy's own compute includes
  // its recompute, which is overhead.
  state.counters["modeled_overhead_pct"] =
      100 * (s.step_ns / static_cast<double>(p.steps.steps.back().compute_ns()) - 1);
  state.counters["modeled_moved_GiB"] = static_cast<double>(s.bytes_d2h + s.bytes_h2d) / double(1ull << 30);
}
BENCHMARK(ReplayPolicy)->DenseRange(0, 7)->Unit(benchmark::kMillisecond);  // every name in policy_names()

// What the policy thread spends at a step's end (learning the step, planning
// it) when many blocks are live: N blocks allocated before the first marker
// (weights, optimizer state), then steps of 80 launches each naming 8 of
// them, as launch_hook_bench's warm-up does. Against N = 100 in the same
// run: a job with a hundred thousand live tensors pays this at every step.
void StepEndWithLiveBlocks(benchmark::State& state) {
  const auto live = static_cast<std::uint64_t>(state.range(0));
  constexpr std::uint64_t kBlockBytes = 2u << 20, kLaunches = 80;
  PolicyEngine::Options o;
  o.budget = live * kBlockBytes * 2;  // all fits: planning finds nothing to move
  o.link = parse_link("pcie5");
  PolicyEngine engine(o);
  auto block = [](std::uint64_t i) { return 0x7f0000000000ull + i * kBlockBytes; };
  for (std::uint64_t i = 0; i < live; ++i) engine.record(Event::alloc(block(i), kBlockBytes));
  std::uint64_t seq = 0, step = 0;
  auto one_step = [&] {
    for (std::uint64_t l = 0; l < kLaunches; ++l, ++seq) {
      engine.record(Event::launch(seq, 20'000));
      for (std::uint64_t u = 0; u < 8; ++u) engine.record(Event::use(block((u * live) / 8), seq));
    }
    engine.record(Event::step(step++));
  };
  for (int warm = 0; warm < 3; ++warm) one_step();  // the first steps learn; later ones run the plan
  for (auto _ : state) one_step();
  state.counters["live_blocks"] = static_cast<double>(live);
  state.counters["steps_learned"] = static_cast<double>(engine.steps_completed());
}
BENCHMARK(StepEndWithLiveBlocks)->Arg(100)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

// A first step's events into a fresh buffer, up to max_step_events (2^22,
// 96 MiB): the policy engine's EventBuffer (grows by moving pages, asks for
// huge pages) against the std::vector<Event> it replaced (copies itself at
// each doubling into freshly faulted 4 KiB pages). A launch and its 8 uses
// are 9 events, all on the policy thread, which must keep up with the
// launches; later steps reuse the memory in both.
template <class Buffer>
void FirstStepEvents(benchmark::State& state) {
  constexpr std::size_t kEvents = std::size_t{1} << 22;
  for (auto _ : state) {
    Buffer b;
    for (std::size_t i = 0; i < kEvents; ++i) b.push_back(Event::use(0x1000 + 64 * (i & 1023), i));
    benchmark::DoNotOptimize(b.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kEvents));  // events/s
}
BENCHMARK(FirstStepEvents<EventBuffer>)->Name("FirstStepEvents/event_buffer")->Unit(benchmark::kMillisecond);
BENCHMARK(FirstStepEvents<Trace>)->Name("FirstStepEvents/std_vector")->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
