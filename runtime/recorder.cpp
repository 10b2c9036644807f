#include "runtime/recorder.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>

#include "policies/trace/trace_file.hpp"
#include "runtime/config.h"
#include "host_clock.h"
#include "log.h"

namespace tierrt {

namespace {

template <class T>
T* reserve(std::uint64_t count) {
  void* p = mmap(nullptr, count * sizeof(T), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<T*>(p);
}

constexpr std::uint64_t kNoCounter = UINT64_MAX;

// Chrome trace thread ids: one track per stream after the fixed ones.
constexpr int kEventsTrack = 1, kD2HTrack = 2, kH2DTrack = 3, kFirstStreamTrack = 16;

double to_mib(std::uint64_t b) { return static_cast<double>(b) / 1048576.0; }

void write_sample(FILE* f, int pid, const ResidencySample& s, std::uint64_t budget, bool* stream_seen,
                  std::size_t streams) {
  const double us = static_cast<double>(s.ns) / 1e3;
  const auto kind = static_cast<SampleKind>(s.kind);
  if (s.device_used != kNoCounter) {
    // One counter event: Perfetto draws each of its values as a track of its own.
    std::fprintf(f, ",\n{\"ph\":\"C\",\"pid\":%d,\"name\":\"memory (MiB)\",\"ts\":%.3f,"
                 "\"args\":{\"device\":%.3f,\"host\":%.3f,\"budget\":%.3f}}",
                 pid, us, to_mib(s.device_used), to_mib(s.host_used), to_mib(budget));
  }
  switch (kind) {
    case SampleKind::Alloc:
    case SampleKind::Free:
      std::fprintf(f, ",\n{\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"ts\":%.3f,"
                   "\"args\":{\"ptr\":\"0x%llx\",\"bytes\":%llu}}",
                   pid, kEventsTrack, kind == SampleKind::Alloc ? "alloc" : "free", us,
                   static_cast<unsigned long long>(s.ptr), static_cast<unsigned long long>(s.bytes));
      break;
    case SampleKind::Step:
    case SampleKind::Phase:
      std::fprintf(f, ",\n{\"ph\":\"i\",\"s\":\"p\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"ts\":%.3f,"
                   "\"args\":{\"%s\":%llu}}",
                   pid, kEventsTrack, kind == SampleKind::Step ? "step" : "phase", us,
                   kind == SampleKind::Step ? "step" : "phase", static_cast<unsigned long long>(s.ptr));
      break;
    case SampleKind::Launches:
      if (s.ptr < streams) stream_seen[s.ptr] = true;
      std::fprintf(f, ",\n{\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":%llu,\"name\":\"launch\",\"ts\":%.3f,"
                   "\"args\":{\"every\":256}}",
                   pid, static_cast<unsigned long long>(kFirstStreamTrack + s.ptr), us);
      break;
    case SampleKind::Spill:
    case SampleKind::Fetch: {
      const double dur = static_cast<double>(s.ptr) / 1e3;
      std::fprintf(f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,"
                   "\"args\":{\"bytes\":%llu}}",
                   pid, kind == SampleKind::Spill ? kD2HTrack : kH2DTrack, kind == SampleKind::Spill ? "spill" : "fetch",
                   us > dur ? us - dur : 0.0, dur, static_cast<unsigned long long>(s.bytes));
      break;
    }
    case SampleKind::DemandFetch:
      std::fprintf(f, ",\n{\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":%d,\"name\":\"demand fetch\",\"ts\":%.3f,"
                   "\"args\":{\"ptr\":\"0x%llx\",\"bytes\":%llu}}",
                   pid, kH2DTrack, us, static_cast<unsigned long long>(s.ptr), static_cast<unsigned long long>(s.bytes));
      break;
    case SampleKind::LateFetch:
      std::fprintf(f, ",\n{\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":%d,\"name\":\"late prefetch\",\"ts\":%.3f,"
                   "\"args\":{\"waited_ms\":%.3f,\"bytes\":%llu}}",
                   pid, kH2DTrack, us, static_cast<double>(s.ptr) / 1e6, static_cast<unsigned long long>(s.bytes));
      break;
  }
}

void write_thread_name(FILE* f, int pid, std::uint64_t tid, const char* name, std::uint64_t number) {
  std::fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%llu,\"name\":\"thread_name\",\"args\":{\"name\":\"",
               pid, static_cast<unsigned long long>(tid));
  std::fprintf(f, name, static_cast<unsigned long long>(number));
  std::fprintf(f, "\"}}");
}

}  // namespace

Recorder::Recorder(const std::string& events_path, const std::string& trace_path)
    : events_path_(events_path), trace_path_(trace_path), start_ns_(steady_ns()) {
  if (!events_path_.empty() && !(events_ = reserve<policy::Event>(kMaxEvents)))
    TIERRT_LOG(Error, "cannot reserve memory for TIERRT_RECORD; not recording");
  if (events_) launch_at_.reset(new std::atomic<std::uint64_t>[kLaunchRing]());
  if (!trace_path_.empty() && !(samples_ = reserve<ResidencySample>(kMaxSamples)))
    TIERRT_LOG(Error, "cannot reserve memory for TIERRT_TRACE; not tracing");
}

std::uint64_t Recorder::now_ns() const noexcept { return steady_ns() - start_ns_; }

void Recorder::event(const policy::Event& e) noexcept {
  std::uint64_t i = n_events_.fetch_add(1, std::memory_order_relaxed);
  if (i < kMaxEvents) events_[i] = e;
}

void Recorder::launch(policy::LaunchSeq seq, policy::StreamId stream, std::span<alloc::Block* const> blocks) noexcept {
  const std::uint64_t n = blocks.size();
  const std::uint64_t now = now_ns();
  const std::uint64_t i = n_events_.fetch_add(n + 1, std::memory_order_relaxed);
  const std::uint64_t prev = last_launch_index_.exchange(i, std::memory_order_relaxed);
  const std::uint64_t prev_ns = last_launch_ns_.exchange(now, std::memory_order_relaxed);
  if (prev < kMaxEvents) {  // unless the device's time for it came first
    std::uint64_t none = 0;
    std::atomic_ref<std::uint64_t>(events_[prev].b).compare_exchange_strong(none, now - prev_ns,
                                                                            std::memory_order_relaxed);
  }
  if (i < kMaxEvents) {
    events_[i] = policy::Event::launch(seq, 0, stream);
    launch_at_[seq % kLaunchRing].store(i + 1, std::memory_order_release);
  }
  for (std::uint64_t k = 0; k < n; ++k)
    if (i + 1 + k < kMaxEvents) events_[i + 1 + k] = policy::Event::use(blocks[k]->va, seq, stream);
}

void Recorder::set_launch_durations(policy::LaunchSeq from, policy::LaunchSeq to, std::uint64_t ns) noexcept {
  if (!events_ || to - from > kLaunchRing) return;
  for (policy::LaunchSeq seq = from; seq < to; ++seq) {
    const std::uint64_t at = launch_at_[seq % kLaunchRing].load(std::memory_order_acquire);
    if (at == 0 || events_[at - 1].kind != policy::EventKind::Launch || events_[at - 1].a != seq) continue;
    std::atomic_ref<std::uint64_t>(events_[at - 1].b).store(ns == 0 ? 1 : ns, std::memory_order_relaxed);
  }
}

void Recorder::mark(SampleKind kind, std::uint64_t ptr, std::uint64_t bytes) noexcept {
  sample(kind, ptr, bytes, kNoCounter, kNoCounter);
}

void Recorder::say_if_full() noexcept {
  const std::uint64_t n = n_samples_.load(std::memory_order_relaxed);
  if (!samples_ || n <= kMaxSamples || said_full_.exchange(true)) return;
  TIERRT_LOG(Warn, "TIERRT_TRACE is full (%llu samples): it records nothing more of this run",
             static_cast<unsigned long long>(kMaxSamples));
}

void Recorder::sample(SampleKind kind, std::uint64_t ptr, std::uint64_t bytes, std::uint64_t device_used,
                      std::uint64_t host_used) noexcept {
  std::uint64_t i = n_samples_.fetch_add(1, std::memory_order_relaxed);
  if (i < kMaxSamples) samples_[i] = ResidencySample{now_ns(), static_cast<std::uint8_t>(kind), ptr, bytes, device_used, host_used};
}

bool Recorder::write() noexcept {
  bool ok = true;
  if (events_) {
    std::uint64_t n = std::min(n_events_.load(), kMaxEvents);
    if (n_events_.load() > kMaxEvents)
      TIERRT_LOG(Warn, "TIERRT_RECORD kept the first %llu events of %llu", static_cast<unsigned long long>(n),
                 static_cast<unsigned long long>(n_events_.load()));
    try {
      const policy::Trace trace(events_, events_ + n);
      if (events_path_ == "-") {
        const std::vector<std::byte> bytes = policy::encode_trace(trace);
        ok = std::fwrite(bytes.data(), 1, bytes.size(), stderr) == bytes.size() && ok;
      } else {
        policy::write_trace_file(config::expand_output_path(events_path_), trace);
      }
    } catch (const std::exception& e) {
      TIERRT_LOG(Error, "TIERRT_RECORD: %s", e.what());
      ok = false;
    }
  }
  if (samples_) {
    FILE* f = trace_path_ == "-" ? stderr : std::fopen(config::expand_output_path(trace_path_).c_str(), "w");
    if (!f) {
      TIERRT_LOG(Error, "cannot write TIERRT_TRACE=\"%s\"", trace_path_.c_str());
      return false;
    }
    say_if_full();
    const std::uint64_t n = std::min(n_samples_.load(), kMaxSamples);
    const int pid = static_cast<int>(getpid());
    const std::uint64_t budget = budget_.load(std::memory_order_relaxed);
    constexpr std::size_t kStreams = 256;  // streams past these get a track, unnamed
    bool stream_seen[kStreams] = {};
    std::fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    std::fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"tierrt (pid %d)\"}}",
                 pid, pid);
    write_thread_name(f, pid, kEventsTrack, "allocations and steps", 0);
    write_thread_name(f, pid, kD2HTrack, "copy engine D2H (spills)", 0);
    write_thread_name(f, pid, kH2DTrack, "copy engine H2D (fetches)", 0);
    for (std::uint64_t i = 0; i < n; ++i) write_sample(f, pid, samples_[i], budget, stream_seen, kStreams);
    for (std::size_t k = 0; k < kStreams; ++k)
      if (stream_seen[k]) write_thread_name(f, pid, kFirstStreamTrack + k, "stream %llu (every 256th launch)", k);
    if (n_samples_.load() > kMaxSamples)
      std::fprintf(f, ",\n{\"ph\":\"i\",\"s\":\"g\",\"pid\":%d,\"tid\":%d,\"name\":\"trace full: nothing "
                   "recorded after this\",\"ts\":%.3f}", pid, kEventsTrack,
                   static_cast<double>(samples_[n - 1].ns) / 1e3);
    std::fprintf(f, "\n]}\n");
    ok = (f == stderr ? std::fflush(f) : std::fclose(f)) == 0 && ok;
  }
  return ok;
}

}  // namespace tierrt
