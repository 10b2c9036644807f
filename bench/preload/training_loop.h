// What the parts of training_loop_bench share: the loop's shape, the
// command line, and the four variants (see training_loop_bench.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace training_loop {

constexpr const char* kProg = "training_loop_bench";
constexpr const char* kVariants[] = {"hbm", "manual-offload", "tierrt-reactive", "tierrt-planner"};
constexpr std::uint32_t kWarmupSteps = 2;  // first steps: page faults, caches, the planner learning
constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Shape {
  std::uint32_t layers = 16;
  std::uint32_t mib = 8;
  std::uint32_t steps = 12;
  // Slower than PCIe: simdev's copies are host memcpy, and on a small host
  // that alone takes about as long as 8 MiB over a 16 GB/s link, so the
  // model would not hold. 5 ms kernels are 2.4x a copy: hiding copies is
  // possible; 2 ms kernels leave less room.
  double link_gbps = 4;
  std::uint32_t kernel_us = 5000;

  std::size_t act_bytes() const { return std::size_t{mib} * kMiB; }
  // Half a step's activations plus two of slack: about half must leave.
  std::size_t budget() const { return (std::size_t{layers} / 2 + 2) * act_bytes(); }
  double copy_us() const { return static_cast<double>(act_bytes()) / (link_gbps * 1e3); }
};

struct Args {
  Shape shape;                          // shape.kernel_us: the worker's
  std::vector<std::uint32_t> kernel_us = {5000, 2000};  // the driver's: one family of runs each
  std::string worker;                   // empty: run as the driver
  std::string libtierrt;                // empty: next to this program in the build tree
};

// Takes this program's own flags out of argv (the rest are Google
// Benchmark's); a bad one exits with one line naming it.
Args parse_args(int* argc, char** argv);

[[noreturn]] void die(const std::string& why);

// The child's side: runs one variant's steps and prints one result line.
int run_worker(const Args& args);

}  // namespace training_loop
