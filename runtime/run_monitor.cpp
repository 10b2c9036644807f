#include "runtime/run_monitor.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "host_clock.h"
#include "log.h"

namespace tierrt {

namespace {

// The signals that end a job politely, and what the application (or the
// default) had them do before tierrt came.
constexpr int kSignals[] = {SIGTERM, SIGINT};
struct sigaction g_previous[2];
std::atomic<int> g_signal_fd{-1};      // the write end of the watched pipe; -1: no monitor listens
std::atomic<pid_t> g_owner{0};         // the process whose thread watches the pipe
std::atomic<RunMonitor*> g_listener{nullptr};

int slot_of(int signo) noexcept { return signo == SIGTERM ? 0 : 1; }

bool is_function(const struct sigaction& a) noexcept {
  return (a.sa_flags & SA_SIGINFO) ? a.sa_sigaction != nullptr
                                   : a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN;
}

// In the handler: what the previous disposition does, for a forked child
// (whose pipe reader is its parent's thread) and after a chained handler.
void act_as_before(int signo, siginfo_t* info, void* uctx) noexcept {
  const struct sigaction& p = g_previous[slot_of(signo)];
  if (p.sa_flags & SA_SIGINFO) {
    if (p.sa_sigaction) p.sa_sigaction(signo, info, uctx);
  } else if (p.sa_handler != SIG_DFL && p.sa_handler != SIG_IGN) {
    p.sa_handler(signo);
  } else if (p.sa_handler == SIG_DFL) {
    sigaction(signo, &p, nullptr);
    raise(signo);
  }
}

StepRow row_between(const RunCounters& a, const RunCounters& b, std::uint64_t index) noexcept {
  auto d = [](std::uint64_t x, std::uint64_t y) { return y > x ? y - x : 0; };
  StepRow r;
  r.index = index;
  r.start_ns = a.ns;
  r.ns = d(a.ns, b.ns);
  r.stall_ns = d(a.stall_ns, b.stall_ns);
  r.bytes_spilled = d(a.bytes_spilled, b.bytes_spilled);
  r.bytes_fetched = d(a.bytes_fetched, b.bytes_fetched);
  r.demand_fetches = d(a.demand_fetches, b.demand_fetches);
  r.planned_prefetches = d(a.planned_prefetches, b.planned_prefetches);
  r.late_prefetches = d(a.late_prefetches, b.late_prefetches);
  return r;
}

}  // namespace

RunMonitor::RunMonitor(ReadCounters read, WriteOutputs write, void* context)
    : read_(read), write_(write), context_(context), start_ns_(steady_ns()) {
  run_start_ = step_start_ = point_before_ = read_now();
  device_budget_ = step_start_.device_budget;
  if (pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) pipe_[0] = pipe_[1] = -1;
  install_handlers();
  thread_ = std::thread([this] { run(); });
}

RunMonitor::~RunMonitor() {
  RunMonitor* self = this;
  if (g_listener.compare_exchange_strong(self, nullptr)) {
    g_signal_fd.store(-1);
    for (int s : kSignals) sigaction(s, &g_previous[slot_of(s)], nullptr);
  }
  stopping_.store(true);
  if (pipe_[1] >= 0) {
    const char wake = 0;
    (void)!write(pipe_[1], &wake, 1);
  }
  if (thread_.joinable()) thread_.join();
  if (pipe_[0] >= 0) close(pipe_[0]);
  if (pipe_[1] >= 0) close(pipe_[1]);
}

// The first monitor of the process listens; a signal already ignored stays so.
void RunMonitor::install_handlers() noexcept {
  RunMonitor* none = nullptr;
  if (pipe_[1] < 0 || !g_listener.compare_exchange_strong(none, this)) return;
  g_owner.store(getpid());
  g_signal_fd.store(pipe_[1]);
  for (int s : kSignals) {
    struct sigaction& before = g_previous[slot_of(s)];
    if (sigaction(s, nullptr, &before) != 0 || (!(before.sa_flags & SA_SIGINFO) && before.sa_handler == SIG_IGN))
      continue;
    // The application's handler runs inside ours: with its mask, and its
    // choice of restarting interrupted calls. Without one, calls restart:
    // the job goes on until the outputs are written.
    struct sigaction ours {};
    ours.sa_sigaction = &RunMonitor::handler;
    ours.sa_flags = SA_SIGINFO | (is_function(before) ? before.sa_flags & SA_RESTART : SA_RESTART);
    ours.sa_mask = before.sa_mask;
    sigaction(s, &ours, nullptr);
  }
}

// Async-signal-safe only: getpid, write, sigaction, raise and the
// application's own handler.
void RunMonitor::handler(int signo, siginfo_t* info, void* uctx) noexcept {
  const int saved_errno = errno;
  const int fd = g_signal_fd.load();
  if (fd >= 0 && g_owner.load() == getpid()) {
    const char byte = static_cast<char>(signo);
    (void)!write(fd, &byte, 1);
    // The application's handler decides what the signal does (the outputs
    // are written all the same, and again at exit if it lets the job end).
    if (is_function(g_previous[slot_of(signo)])) act_as_before(signo, info, uctx);
  } else {
    act_as_before(signo, info, uctx);
  }
  errno = saved_errno;
}

void RunMonitor::on_signal(int signo) noexcept {
  TIERRT_LOG(Info, "signal %d: writing the outputs", signo);
  write_(context_);
  const struct sigaction& before = g_previous[slot_of(signo)];
  if (is_function(before)) return;  // the application's handler had it already
  sigaction(signo, &before, nullptr);
  kill(getpid(), signo);
}

RunCounters RunMonitor::read_now() noexcept {
  RunCounters c = read_(context_);
  c.ns = steady_ns() - start_ns_;
  return c;
}

void RunMonitor::run() noexcept {
  pthread_setname_np(pthread_self(), "tierrt-monitor");  // for top -H, gdb, profilers
  pollfd p{pipe_[0], POLLIN, 0};
  while (!stopping_.load()) {
    const int wait_ms = static_cast<int>(std::max<std::uint64_t>(1, kFirstPeriodNs / 1'000'000));
    if (pipe_[0] >= 0 && poll(&p, 1, wait_ms) > 0) {
      char bytes[16];
      const ssize_t n = read(pipe_[0], bytes, sizeof bytes);
      for (ssize_t i = 0; i < n && !stopping_.load(); ++i)
        if (bytes[i] == SIGTERM || bytes[i] == SIGINT) on_signal(bytes[i]);
    } else if (pipe_[0] < 0) {
      usleep(static_cast<useconds_t>(wait_ms) * 1000);
    }
    if (!stopping_.load()) tick();
  }
}

void RunMonitor::tick() noexcept {
  const RunCounters now = read_now();
  std::lock_guard lock(mu_);
  // Steps the planner found, when the application marks none.
  if (!marked_ && now.steps_detected > step_start_.steps_detected)
    close_step(now, now.steps_detected - 1, now.steps_detected - step_start_.steps_detected);
  if (now.ns >= next_point_ns_) add_point(now);
}

void RunMonitor::step_marked() noexcept {
  const RunCounters now = read_now();
  std::lock_guard lock(mu_);
  if (!marked_) {  // markers win: steps found before the first one are dropped
    marked_ = true;
    steps_.clear();
    steps_dropped_ = steps_closed_ = 0;
    step_start_ = run_start_;
  }
  close_step(now, steps_closed_, 1);
}

void RunMonitor::close_step(const RunCounters& now, std::uint64_t index, std::uint64_t steps) noexcept {
  steps_.push_back(row_between(step_start_, now, index));
  steps_.back().steps = steps;
  if (steps_.size() > kMaxSteps) {
    steps_.pop_front();
    ++steps_dropped_;
  }
  ++steps_closed_;
  step_start_ = now;
  ++boundaries_since_point_;
}

void RunMonitor::add_point(const RunCounters& now) noexcept {
  if (points_.size() == kMaxPoints) {
    // Full: every other point goes, and points come half as often. What
    // moved and the step boundaries are carried into the points kept.
    for (std::size_t i = 0; i + 1 < points_.size(); i += 2) {
      TimelinePoint merged = points_[i + 1];
      merged.spilled += points_[i].spilled;
      merged.fetched += points_[i].fetched;
      merged.steps += points_[i].steps;
      points_[i / 2] = merged;
    }
    points_.resize(points_.size() / 2);
    period_ns_ *= 2;
    ++downsamplings_;
  }
  TimelinePoint p;
  p.ns = now.ns;
  p.device_used = now.device_used;
  p.host_used = now.host_used;
  std::copy(std::begin(now.class_bytes), std::end(now.class_bytes), p.class_bytes);
  p.spilled = now.bytes_spilled > point_before_.bytes_spilled ? now.bytes_spilled - point_before_.bytes_spilled : 0;
  p.fetched = now.bytes_fetched > point_before_.bytes_fetched ? now.bytes_fetched - point_before_.bytes_fetched : 0;
  p.steps = boundaries_since_point_;
  boundaries_since_point_ = 0;
  points_.push_back(p);
  point_before_ = now;
  next_point_ns_ = now.ns + period_ns_;
}

void RunMonitor::sample_now() noexcept {
  const RunCounters now = read_now();
  std::lock_guard lock(mu_);
  add_point(now);
}

RunMonitor::Snapshot RunMonitor::snapshot() {
  const RunCounters now = read_now();
  Snapshot s;
  {
    std::lock_guard lock(mu_);
    if (points_.empty() || now.ns > points_.back().ns) add_point(now);
    s.steps.assign(steps_.begin(), steps_.end());
    s.steps_dropped = steps_dropped_;
    s.points = points_;
    s.period_ns = period_ns_;
    s.downsamplings = downsamplings_;
    s.device_budget = device_budget_;
  }
  return s;
}

}  // namespace tierrt
