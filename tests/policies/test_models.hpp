// Small model shapes and trace builders the policy tests share, so that tests run in
// milliseconds while exercising the same code paths as the shipped configurations.
#pragma once

#include <cstdint>
#include <random>

#include "policies/eval/transformer_synth.hpp"
#include "policies/event.hpp"

namespace tierrt::policy::test {

inline ModelConfig tiny_dense() {
  return {"tiny-dense", 1024, 4096, 16, 4, 64, 64, 8, 32000, 0, 0, 0, 0, 0};
}

inline ModelConfig tiny_moe() {
  return {"tiny-moe", 1024, 4096, 16, 16, 64, 64, 6, 32000, 16, 2, 1, 512, 1};
}

inline SynthOptions tiny_options(const ModelConfig& m, std::uint32_t steps = 3) {
  SynthOptions o;
  o.model = m;
  o.shape.seq = 1024;
  o.shape.tp = 1;
  o.shape.ep = 4;
  o.shape.tflops = 50;
  o.steps = steps;
  return o;
}

// A random step-structured trace: persistent blocks, then `steps` copies of one
// random step (same allocation sizes, launches and uses; fresh block ids), with
// step markers. Random blocks may live across the whole step, die young, or sit
// idle between two distant uses.
inline Trace random_trace(std::uint64_t seed, std::uint32_t steps = 3) {
  std::mt19937_64 rng(seed);
  auto uni = [&](std::uint64_t lo, std::uint64_t hi) { return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng); };
  const std::uint32_t ops = static_cast<std::uint32_t>(uni(4, 60));
  const std::uint32_t nblocks = static_cast<std::uint32_t>(uni(1, 50));
  const std::uint32_t npersistent = static_cast<std::uint32_t>(uni(0, 4));
  struct B { std::uint64_t bytes; std::uint32_t alloc, free; std::vector<std::uint32_t> uses; };
  std::vector<B> blocks;
  for (std::uint32_t i = 0; i < nblocks; ++i) {
    B b;
    b.bytes = uni(1, 1024) << 20;
    b.alloc = static_cast<std::uint32_t>(uni(0, ops - 1));
    b.free = static_cast<std::uint32_t>(uni(b.alloc + 1, ops));
    const auto nuses = uni(1, 4);
    for (std::uint64_t u = 0; u < nuses; ++u) b.uses.push_back(static_cast<std::uint32_t>(uni(b.alloc, b.free - 1)));
    std::sort(b.uses.begin(), b.uses.end());
    b.uses.erase(std::unique(b.uses.begin(), b.uses.end()), b.uses.end());
    blocks.push_back(b);
  }
  std::vector<std::uint64_t> durations(ops);
  for (auto& d : durations) d = uni(10'000, 10'000'000);
  Trace t;
  BlockId next = 1;
  LaunchSeq seq = 0;
  std::vector<BlockId> persistent;
  for (std::uint32_t i = 0; i < npersistent; ++i) {
    persistent.push_back(next);
    t.push_back(Event::alloc(next++, uni(1, 512) << 20));
  }
  for (std::uint32_t s = 0; s < steps; ++s) {
    t.push_back(Event::step(s));
    std::vector<BlockId> ids(nblocks);
    for (std::uint32_t i = 0; i < ops; ++i) {
      for (std::uint32_t b = 0; b < nblocks; ++b)
        if (blocks[b].alloc == i) ids[b] = next, t.push_back(Event::alloc(next++, blocks[b].bytes));
      const LaunchSeq l = seq++;
      t.push_back(Event::launch(l, durations[i]));
      if (!persistent.empty()) t.push_back(Event::use(persistent[i % persistent.size()], l));
      for (std::uint32_t b = 0; b < nblocks; ++b)
        if (std::binary_search(blocks[b].uses.begin(), blocks[b].uses.end(), i)) t.push_back(Event::use(ids[b], l));
      for (std::uint32_t b = 0; b < nblocks; ++b)
        if (blocks[b].free == i + 1) t.push_back(Event::free(ids[b]));
    }
  }
  return t;
}

// A kind of noise in synthesized steps (tierrt-replay's --temporaries,
// --reorder, --jitter), and the tiny dense model's steps with it.
struct NoiseCase {
  const char* name;
  std::uint32_t temporaries;
  double reorder;
  double jitter;
};
inline SynthOptions noisy(const NoiseCase& c, std::uint64_t seed, std::uint32_t steps) {
  auto o = tiny_options(tiny_dense(), steps);
  o.noise_transients = c.temporaries;
  o.reorder_probability = c.reorder;
  o.duration_jitter = c.jitter;
  o.seed = seed;
  return o;
}

// A pool a framework allocated once, before the first step (PyTorch's
// caching allocator's segment, tiered per granule: lazy blocks), and steps
// that carve the same activations out of it each time: granule k is written
// at launch k of the forward pass and read at launch 2n-1-k of the backward
// pass, every launch `launch_ns` long. Granule ids are 0x1000 * (k + 1).
inline Trace pool_trace(std::uint32_t granules, std::uint64_t bytes, std::uint64_t launch_ns, std::uint32_t steps) {
  Trace t;
  for (std::uint32_t k = 0; k < granules; ++k) t.push_back(Event::alloc(0x1000 * (k + 1), bytes, 0, /*lazy=*/true));
  LaunchSeq seq = 0;
  for (std::uint32_t step = 0; step < steps; ++step) {
    t.push_back(Event::step(step));
    for (std::uint32_t op = 0; op < 2 * granules; ++op) {
      const std::uint32_t k = op < granules ? op : 2 * granules - 1 - op;
      t.push_back(Event::launch(seq, launch_ns));
      t.push_back(Event::use(0x1000 * (k + 1), seq));
      ++seq;
    }
  }
  t.push_back(Event::step(steps));
  return t;
}

}  // namespace tierrt::policy::test
