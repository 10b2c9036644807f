// The run monitor alone, on counters the test sets: per-step rows capped
// with a count of the dropped ones, a timeline of bounded size that keeps
// what moved when it downsamples, and SIGTERM handled by writing the outputs
// and then by the application's own handler.
#include "runtime/run_monitor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "runtime/log.h"
#include "runtime/recorder.h"
#include "runtime/timeline_svg.h"

namespace tierrt {
namespace {

struct Fake {
  std::atomic<std::uint64_t> spilled{0}, fetched{0}, planned{0}, late{0};
  std::atomic<int> writes{0};
};

RunCounters read_fake(void* c) noexcept {
  Fake& f = *static_cast<Fake*>(c);
  RunCounters r;
  r.device_used = 3 << 20;
  r.device_budget = 8 << 20;
  r.class_bytes[2] = 1 << 20;
  r.bytes_spilled = f.spilled.load();
  r.bytes_fetched = f.fetched.load();
  r.planned_prefetches = f.planned.load();
  r.late_prefetches = f.late.load();
  return r;
}

void write_fake(void* c) noexcept { static_cast<Fake*>(c)->writes.fetch_add(1); }

TEST(RunMonitor, KeepsTheLastStepsAndCountsTheDroppedOnes) {
  Fake f;
  RunMonitor m(&read_fake, &write_fake, &f);
  const std::size_t marked = RunMonitor::kMaxSteps + 250;
  for (std::size_t i = 0; i < marked; ++i) {
    f.spilled += 100;
    m.step_marked();
  }
  const RunMonitor::Snapshot s = m.snapshot();
  ASSERT_EQ(RunMonitor::kMaxSteps, s.steps.size());
  EXPECT_EQ(250u, s.steps_dropped);
  EXPECT_EQ(250u, s.steps.front().index);
  EXPECT_EQ(marked - 1, s.steps.back().index);
  for (const StepRow& r : s.steps) EXPECT_EQ(100u, r.bytes_spilled);
}

TEST(RunMonitor, TimelineStaysBoundedAndKeepsWhatMoved) {
  Fake f;
  RunMonitor m(&read_fake, &write_fake, &f);
  for (int i = 0; i < 3 * static_cast<int>(RunMonitor::kMaxPoints); ++i) {
    f.spilled += 4096;
    f.fetched += 1024;
    if (i % 100 == 0) m.step_marked();
    m.sample_now();
  }
  const RunMonitor::Snapshot s = m.snapshot();
  EXPECT_LE(s.points.size(), RunMonitor::kMaxPoints);
  EXPECT_GE(s.downsamplings, 1u);
  std::uint64_t spilled = 0, fetched = 0, steps = 0;
  for (const TimelinePoint& p : s.points) {
    spilled += p.spilled;
    fetched += p.fetched;
    steps += p.steps;
  }
  EXPECT_EQ(f.spilled.load(), spilled);
  EXPECT_EQ(f.fetched.load(), fetched);
  EXPECT_EQ(3 * RunMonitor::kMaxPoints / 100 + 1, steps);
}

std::atomic<int> g_application_saw{0};
void application_handler(int) { g_application_saw.fetch_add(1); }

TEST(RunMonitor, SigtermWritesTheOutputsAndChainsToTheApplicationsHandler) {
  struct sigaction app {}, before {};
  app.sa_handler = &application_handler;
  sigemptyset(&app.sa_mask);
  ASSERT_EQ(0, sigaction(SIGTERM, &app, &before));
  Fake f;
  {
    RunMonitor m(&read_fake, &write_fake, &f);
    ASSERT_EQ(0, kill(getpid(), SIGTERM));  // the application's handler keeps the process alive
    for (int i = 0; i < 2000 && f.writes.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(1, f.writes.load());
    EXPECT_EQ(1, g_application_saw.load());
  }
  struct sigaction now {};
  ASSERT_EQ(0, sigaction(SIGTERM, nullptr, &now));
  EXPECT_EQ(&application_handler, now.sa_handler) << "the monitor gone, the application's handler is back";
  sigaction(SIGTERM, &before, nullptr);
}

TEST(TimelineSvg, AxisStepsAreRound) {
  EXPECT_DOUBLE_EQ(0.02, axis_step(0.1, 5));
  EXPECT_DOUBLE_EQ(5, axis_step(24, 5));
  EXPECT_DOUBLE_EQ(200, axis_step(700, 5));
}

TEST(TimelineSvg, SmallRunsReadInUnitsThatTellTicksApart) {
  Fake f;
  RunMonitor m(&read_fake, &write_fake, &f);
  m.sample_now();
  f.spilled += 1 << 20;
  m.sample_now();
  const std::string path = ::testing::TempDir() + "timeline_small.svg";
  ASSERT_TRUE(write_timeline_svg(path, m.snapshot()));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  // 8 MiB budget: ticks of 2 MiB, not 0.0 0.0 0.1 of a larger unit.
  EXPECT_NE(std::string::npos, text.str().find(">2 MiB<")) << text.str();
  EXPECT_NE(std::string::npos, text.str().find("id=\"spills\"")) << text.str();
  std::remove(path.c_str());
}

TEST(Recorder, SaysOnceThatTheTraceIsFull) {
  log::configure(LogLevel::Warn, nullptr);
  Recorder r("", ::testing::TempDir() + "full_trace.json");
  ASSERT_TRUE(r.samples_on());
  ::testing::internal::CaptureStderr();
  r.say_if_full();
  EXPECT_EQ("", ::testing::internal::GetCapturedStderr()) << "nothing to say before the trace is full";
  for (int i = 0; i <= (1 << 20); ++i) r.mark(SampleKind::Spill, 1000, 4096);
  ::testing::internal::CaptureStderr();
  r.say_if_full();
  r.say_if_full();
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(std::string::npos, said.find("TIERRT_TRACE is full")) << said;
  EXPECT_EQ(said.find("TIERRT_TRACE is full"), said.rfind("TIERRT_TRACE is full")) << "said more than once: " << said;
}

}  // namespace
}  // namespace tierrt
