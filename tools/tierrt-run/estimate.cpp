#include "estimate.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <ostream>

#include "policies/eval/measured_link.hpp"
#include "policies/eval/policy_comparison.hpp"
#include "policies/eval/trace_steps.hpp"
#include "policies/trace/trace_file.hpp"

namespace tierrt::run {

namespace {

volatile sig_atomic_t g_child = 0;

// The command is in our process group, so a terminal's Ctrl-C reaches it by
// itself (the kernel sends it: SI_KERNEL), and passing it on would deliver it
// twice; a signal a process sent to this one (kill, a batch system) is
// passed on. Either way this process waits for the command's end, then
// estimates from what it recorded (tierrt writes the recording on SIGTERM
// and SIGINT too).
void forward(int sig, siginfo_t* info, void*) {
  if (g_child > 0 && info->si_code != SI_KERNEL) kill(static_cast<pid_t>(g_child), sig);
}

std::string bytes_text(double b) {
  char buf[48];
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  return buf;
}

std::string ms_text(double ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f ms", ns / 1e6);
  return buf;
}

std::string percent_text(double overhead) {
  if (!std::isfinite(overhead)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100 * overhead);
  return buf;
}

}  // namespace

bool estimate_variables(std::vector<std::pair<std::string, std::string>>* vars, const std::string& recording,
                        std::string* error) {
  for (const auto& [name, value] : *vars)
    if (name == "TIERRT_MODE" && value != "observe") {
      *error = "tierrt-run: --estimate runs the command in observe mode; --mode=" + value + " contradicts it";
      return false;
    }
  if (recording.find('%') != std::string::npos) {
    *error = "tierrt-run: --estimate reads the recording back, so its file name (" + recording +
             ") cannot hold placeholders such as %p or %r";
    return false;
  }
  auto set = [&](const char* name, const std::string& value) {
    for (auto& v : *vars)
      if (v.first == name) {
        v.second = value;
        return;
      }
    vars->emplace_back(name, value);
  };
  set("TIERRT_MODE", "observe");
  set("TIERRT_RECORD", recording);
  return true;
}

std::string temporary_recording(std::string* error) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = (dir && *dir && std::strchr(dir, '%') == nullptr) ? dir : "/tmp";
  path += "/tierrt-estimate-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) {
    *error = "tierrt-run: --estimate cannot create a file for the recording (" + path + "): " + std::strerror(errno);
    return "";
  }
  close(fd);
  return path;
}

int run_and_wait(std::vector<std::string> argv) {
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  // Told by the child when exec fails: its errno through a close-on-exec pipe.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "tierrt-run: cannot run %s: %s\n", args[0], std::strerror(errno));
    return 127;
  }
  // Installed before the fork (exec resets them in the command): a signal
  // that comes before the command's pid is known is dropped rather than
  // ending this process and leaving the command running unwatched.
  struct sigaction sa {};
  sa.sa_sigaction = forward;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "tierrt-run: cannot run %s: %s\n", args[0], std::strerror(errno));
    return 127;
  }
  if (child == 0) {
    close(fds[0]);
    execvp(args[0], args.data());
    const int e = errno;
    (void)!write(fds[1], &e, sizeof e);
    _exit(127);
  }
  close(fds[1]);
  g_child = child;
  int exec_errno = 0;
  ssize_t got;
  while ((got = read(fds[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;  // its pid may be another process's from now on
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    std::fprintf(stderr, "tierrt-run: cannot run %s: %s\n", args[0], std::strerror(exec_errno));
    return 127;
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

bool print_estimate(const std::string& recording, const policy::LinkModel& fallback_link, bool link_given,
                    std::ostream& out, std::ostream& err) {
  if (struct stat st {}; stat(recording.c_str(), &st) == 0 && st.st_size == 0) {
    err << "tierrt-run: --estimate: no estimate, the command made no CUDA call that tierrt saw (nothing was recorded)\n";
    return false;
  }
  policy::Trace trace;
  try {
    trace = policy::read_trace_file(recording);
  } catch (const std::exception& e) {
    err << "tierrt-run: --estimate: no estimate, the run's recording cannot be read: " << e.what() << "\n";
    return false;
  }
  // The run measured no link in observe mode; a recording of a tiered run
  // (--record of an earlier run is not read here) could have.
  policy::LinkModel link = fallback_link;
  std::string link_source = link_given ? "as --link / TIERRT_LINK says" : "assumed (set --link for your machine)";
  if (auto measured = policy::measured_link(trace, fallback_link)) {
    link = *measured;
    link_source = "measured by the run";
  }
  std::erase_if(trace, [](const policy::Event& e) { return e.kind == policy::EventKind::CopyRate; });
  const policy::TraceSteps analysed = policy::analyse_trace(trace);
  std::size_t launches = 0;
  for (const auto& e : trace) launches += e.kind == policy::EventKind::Launch;
  if (analysed.steps.empty()) {
    err << "tierrt-run: --estimate: no estimate, no repeating training step was found in the run (" << launches
        << " launches, " << trace.size() << " events; a job that calls tierrt_mark_step each step is always cut "
        << "into steps)\n";
    return false;
  }
  std::uint64_t tiered_bytes = 0;
  for (const auto& step : analysed.steps)
    for (const auto& b : step.blocks) tiered_bytes += b.bytes;
  if (tiered_bytes == 0) {
    err << "tierrt-run: --estimate: no estimate, no block tierrt would tier (of at least TIERRT_MIN_BYTES, default "
           "1 MiB) was live in the steps found: tierrt would move nothing\n";
    return false;
  }
  out << "tierrt-run --estimate: MODELED from this run's recording (observe mode, nothing moved), not measured\n"
      << "  steps     " << analysed.steps.size() << " found "
      << (analysed.detection.used_markers ? "(from tierrt_mark_step)" : "(repeating launches, no step markers)")
      << "; figures for the last" << (analysed.steps.size() < 2 ? " (the only one: the planner is still learning)" : "")
      << "\n"
      << "  link      " << policy::describe_link(link) << ", " << link_source << "\n";
  bool first = true;
  for (const double fraction : {0.25, 0.5, 0.75, 1.0}) {
    policy::BudgetChoice budget;
    budget.offload_fraction = fraction;
    const policy::Comparison c = policy::compare_policies(analysed.steps, {"none", "tierrt"}, link, budget, false);
    const policy::PolicyFigures* none = nullptr;
    const policy::PolicyFigures* tierrt = nullptr;
    for (const auto& p : c.policies) (p.name == "none" ? none : tierrt) = &p;
    if (!none || !tierrt) continue;
    if (first && c.activation_bytes_at_peak == 0) break;
    if (first) {
      out << "  no offload: tiered blocks peak at " << bytes_text(static_cast<double>(c.peak_without_offload)) << ", step "
          << ms_text(none->steady.step_ns) << " (device time of its launches " << ms_text(c.compute_ns)
          << "); activations live at the peak " << bytes_text(static_cast<double>(c.activation_bytes_at_peak)) << "\n\n";
      char head[160];
      std::snprintf(head, sizeof head, "  %-10s %-14s %-12s %-12s %-9s %-14s %s\n", "offloads", "budget", "peak",
                    "step", "vs none", "moved/step", "budget");
      out << head;
      first = false;
    }
    const auto& s = tierrt->steady;
    char line[200];
    std::snprintf(line, sizeof line, "  %-10s %-14s %-12s %-12s %-9s %-14s %s\n",
                  (std::to_string(static_cast<int>(fraction * 100)) + "%").c_str(),
                  bytes_text(static_cast<double>(c.budget)).c_str(), bytes_text(static_cast<double>(s.peak_bytes)).c_str(),
                  ms_text(s.step_ns).c_str(), percent_text(tierrt->overhead_vs_none).c_str(),
                  bytes_text(static_cast<double>(s.bytes_d2h + s.bytes_h2d)).c_str(),
                  s.over_budget_bytes == 0 ? "held" : "EXCEEDED");
    out << line;
  }
  if (first) {
    err << "tierrt-run: --estimate: no estimate, the steps found hold no activation (a block written and read "
           "again within a step) at their peak: what is there is resident for the whole step\n";
    return false;
  }
  out << "\n  offloads: share of the activation bytes live at the peak that the budget forces off the device;\n"
         "  peak, step: what tierrt's planner reaches there (modeled); moved/step: bytes copied to and from the host.\n"
         "  Run it: tierrt-run --budget=SIZE -- the same command.\n";
  return true;
}

}  // namespace tierrt::run
