// tierrt-replay as a user runs it: help, one-line errors for bad arguments, a trace
// round trip through synth and replay, and modeled labels on every output.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "policies/eval/transformer_synth.hpp"
#include "policies/trace/trace_file.hpp"

namespace {

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr together
};

std::string tool() {
  const char* p = std::getenv("TIERRT_REPLAY");
  return p ? p : "";
}

Result run(const std::string& args) {
  Result r;
  FILE* f = ::popen((tool() + " " + args + " 2>&1").c_str(), "r");
  if (!f) return r;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), f)) r.out += buf.data();
  const int st = ::pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class ReplayCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (tool().empty()) GTEST_SKIP() << "TIERRT_REPLAY not set";
    dir_ = std::filesystem::temp_directory_path() / ("tierrt-replay-cli-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

TEST_F(ReplayCli, HelpDescribesEveryCommand) {
  const auto r = run("--help");
  EXPECT_EQ(r.status, 0);
  for (const char* w : {"synth", "replay", "shipped", "--link", "--csv", "--svg", "modeled", "--temporaries",
                        "--reorder", "--jitter", "--seed", "--grad-accum", "--markers"})
    EXPECT_NE(r.out.find(w), std::string::npos) << w;
}

TEST_F(ReplayCli, BadArgumentsAreOneLineErrors) {
  for (const char* bad : {"", "frobnicate", "replay", "replay --model gpt-9", "replay --model llama3.1-8b --link pcie9",
                          "replay --model llama3.1-8b --seq -4", "replay --model llama3.1-8b --seq 12x",
                          "replay --model llama3.1-8b --policies none,magic", "replay --model llama3.1-8b --offload-fraction 2",
                          "replay --model llama3.1-8b --budget-gib 10 --offload-all", "synth --model llama3.1-8b",
                          "replay --model llama3.1-8b --seq", "replay --trace a --model llama3.1-8b", "replay --seq 100",
                          "replay --model llama3.1-8b --bogus", "replay --model llama3.1-8b --temporaries -1",
                          "replay --model llama3.1-8b --reorder 1.5", "replay --model llama3.1-8b --jitter 1",
                          "replay --model llama3.1-8b --seed x", "replay --trace a --temporaries 2",
                          "shipped --reorder 0.5", "replay --model llama3.1-8b --grad-accum 0"}) {
    const auto r = run(bad);
    EXPECT_EQ(r.status, 2) << bad << ": " << r.out;
    EXPECT_EQ(r.out.rfind("tierrt-replay: ", 0), 0u) << bad << ": " << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << bad << ": more than one line: " << r.out;
  }
}

// A step that does not repeat is no step: one line saying so, and no table.
TEST_F(ReplayCli, NoRepeatingStepIsOneLineAndNoFigures) {
  const auto trace = dir_ / "one.trace";
  auto r = run("synth --model llama3.1-8b --seq 1024 --steps 1 -o " + trace.string());
  ASSERT_EQ(r.status, 0) << r.out;
  r = run("replay --trace " + trace.string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out.rfind("tierrt-replay: no training step found (", 0), 0u) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;
  EXPECT_EQ(r.out.find("tierrt "), std::string::npos) << r.out;
}

TEST_F(ReplayCli, NoiseOptionsReachTheSynthesizedStep) {
  const auto r = run("replay --model llama3.1-8b --seq 1024 --temporaries 2 --reorder 0.5 --jitter 0.2 --seed 7 "
                     "--policies none,tierrt");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("noise: 2 temporaries, reorder 0.50, jitter 0.20, seed 7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ntierrt "), std::string::npos) << r.out;
}

TEST_F(ReplayCli, CorruptTraceIsAOneLineError) {
  const auto path = dir_ / "bad.trace";
  std::ofstream(path) << "not a trace at all, but long enough to hold a header";
  const auto r = run("replay --trace " + path.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "tierrt-replay: " + path.string() + ": not a tierrt trace (bad magic)\n");
}

TEST_F(ReplayCli, SynthThenReplayWithCsvAndSvg) {
  const auto trace = dir_ / "8b.trace", csv = dir_ / "out.csv", svg = dir_ / "out.svg";
  auto r = run("synth --model llama3.1-8b --seq 1024 --steps 2 -o " + trace.string());
  ASSERT_EQ(r.status, 0) << r.out;
  r = run("replay --trace " + trace.string() + " --link c2c --csv " + csv.string() + " --svg " + svg.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("MODELED"), std::string::npos);
  for (const char* p : {"none", "lru", "vdnn", "te", "jax", "save_on_cpu", "checkpoint", "tierrt"})
    EXPECT_NE(r.out.find(std::string("\n") + p + " "), std::string::npos) << p;
  const std::string c = slurp(csv);
  EXPECT_EQ(c.rfind("# modeled", 0), 0u);
  for (const char* col : {"modeled_peak_hbm_gib", "modeled_activation_recomputed", "modeled_recompute_ms",
                          "modeled_stream_copy_ms"})
    EXPECT_NE(c.find(col), std::string::npos) << col;
  EXPECT_EQ(std::count(c.begin(), c.end(), '\n'), 2 + 8);  // comment, header, eight policies
  const std::string s = slurp(svg);
  EXPECT_EQ(s.rfind("<svg", 0), 0u);
  EXPECT_NE(s.find("</svg>"), std::string::npos);
  EXPECT_NE(s.find("MODELED"), std::string::npos);
  EXPECT_NE(s.find("stroke-dasharray"), std::string::npos);  // the budget line
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n') > 10, true);
  std::size_t lines = 0;
  for (std::size_t at = 0; (at = s.find("<polyline", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 8u);
}

TEST_F(ReplayCli, OffloadAllSaysWhatItMovedAndNewBaselinesAreSelectable) {
  const auto r = run("replay --model llama3.1-8b --seq 1024 --steps 2 --offload-all --policies none,save_on_cpu,checkpoint,tierrt");
  ASSERT_EQ(r.status, 0) << r.out;
  // The budget is labelled by the share tierrt actually moved, never "every activation".
  EXPECT_NE(r.out.find("% of the activation bytes moved)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("every activation spilled"), std::string::npos) << r.out;
  for (const char* p : {"none", "save_on_cpu", "checkpoint", "tierrt"})
    EXPECT_NE(r.out.find(std::string("\n") + p + " "), std::string::npos) << p;
  EXPECT_EQ(r.out.find("\nlru "), std::string::npos);
}

TEST_F(ReplayCli, RecordedTraceWithoutNamesSkipsNamedBaselines) {
  // A recorded trace carries no Tag events: the baselines that select tensors by
  // name cannot run, and the tool says so instead of guessing.
  tierrt::policy::SynthOptions o;
  o.model = *tierrt::policy::find_model("llama3.1-8b");
  o.shape = tierrt::policy::default_shape(o.model);
  o.shape.seq = 1024;
  o.steps = 2;
  tierrt::policy::Trace t;
  for (const auto& e : tierrt::policy::synthesize(o))
    if (e.kind != tierrt::policy::EventKind::Tag) t.push_back(e);
  const auto path = dir_ / "recorded.trace";
  tierrt::policy::write_trace_file(path.string(), t);
  const auto r = run("replay --trace " + path.string());
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* p : {"vdnn", "te", "jax", "save_on_cpu", "checkpoint"})
    EXPECT_NE(r.out.find(std::string("skipped ") + p + ": needs tensor names"), std::string::npos) << p;
  for (const char* p : {"none", "lru", "tierrt"}) EXPECT_NE(r.out.find(std::string("\n") + p + " "), std::string::npos) << p;
  EXPECT_NE(r.out.find("(recorded)"), std::string::npos);
}

}  // namespace
