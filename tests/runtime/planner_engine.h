// Helpers for the tests of a running planner's thread: an engine of its own
// (tiering, the planner) on simdev, and a wait for what that thread does.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "runtime/engine.h"
#include "tests/runtime/simdev_kernels.h"

namespace tierrt::testing_planner {

// `record`: a file for TIERRT_RECORD's event stream (none when empty).
inline std::unique_ptr<Engine> planner_engine(const std::string& record = {}) {
  static testing_simdev::Kernels k;  // a context current on this thread
  static const bool ready = [] {
    testing_simdev::set_up(&k);
    return true;
  }();
  (void)ready;
  Settings s;
  std::string error;
  EXPECT_TRUE(read_settings(&s, &error)) << error;
  s.mode = Mode::Tier;
  s.policy = Policy::Planner;
  s.record = record;
  CUresult err = CUDA_SUCCESS;
  std::unique_ptr<Engine> e = Engine::create(s, &err);
  EXPECT_NE(nullptr, e) << "the engine did not start: " << err;
  return e;
}

// Waits up to `limit` for `done`; false when it never held.
template <class Done>
bool eventually(Done done, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

}  // namespace tierrt::testing_planner
