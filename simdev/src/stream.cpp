#include "stream.h"

#include <pthread.h>

#include <atomic>
#include <map>
#include <unordered_map>

#include "capture.h"
#include "state.h"

namespace simdev {

namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<Stream*, StreamPtr> live;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: workers outlive main
  return *r;
}

std::atomic<unsigned long long> g_next_stream_id{1};

thread_local int tl_worker_device = 0;  // the device of the stream this worker runs

// The per-thread default stream of each context, gone with the thread.
struct PerThreadStreams {
  std::map<Context*, StreamPtr> by_context;
  ~PerThreadStreams() {
    for (auto& [ctx, s] : by_context) s->drain_and_stop();
  }
};
thread_local PerThreadStreams tl_per_thread;

void register_stream(const StreamPtr& s) {
  std::lock_guard lock(registry().mu);
  registry().live.emplace(s.get(), s);
}

StreamPtr legacy_stream(Context* ctx) {
  std::lock_guard lock(registry().mu);
  if (!ctx->legacy_stream) {
    ctx->legacy_stream = Stream::create(ctx, StreamKind::kLegacyDefault, 0, 0);
    registry().live.emplace(ctx->legacy_stream.get(), ctx->legacy_stream);
  }
  return ctx->legacy_stream;
}

StreamPtr per_thread_stream(Context* ctx) {
  auto& slot = tl_per_thread.by_context[ctx];
  if (!slot) {
    slot = Stream::create(ctx, StreamKind::kPerThreadDefault, 0, 0);
    register_stream(slot);
  }
  return slot;
}

}  // namespace

Stream::Stream(Context* ctx, StreamKind kind, unsigned flags, int priority)
    : ctx_(ctx), kind_(kind), flags_(flags), priority_(priority), id_(g_next_stream_id++) {}

Stream::~Stream() = default;

StreamPtr Stream::create(Context* ctx, StreamKind kind, unsigned flags, int priority) {
  StreamPtr s(new Stream(ctx, kind, flags, priority));
  // The worker owns a reference until its queue is drained after destroy.
  std::thread([self = s] { self->worker_loop(); }).detach();
  return s;
}

uint64_t Stream::enqueue(Work w) {
  std::lock_guard lock(mu_);
  queue_.push_back(std::move(w));
  uint64_t seq = ++submitted_;
  work_cv_.notify_one();  // the worker: no thread waiting for completion has anything to see yet
  return seq;
}

uint64_t Stream::submitted() {
  std::lock_guard lock(mu_);
  return submitted_;
}

bool Stream::reached(uint64_t seq) {
  std::lock_guard lock(mu_);
  return completed_ >= seq;
}

void Stream::wait(uint64_t seq) {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return completed_ >= seq; });
}

void Stream::drain_and_stop() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  work_cv_.notify_all();
}

bool Stream::stopping() {
  std::lock_guard lock(mu_);
  return stopping_;
}

int worker_device() { return tl_worker_device; }

void Stream::worker_loop() {
  pthread_setname_np(pthread_self(), "simdev-stream");  // a stream's worker, apart from the application's threads
  tl_worker_device = ctx_->device;
  for (;;) {
    Work w;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) break;
      w = std::move(queue_.front());
      queue_.pop_front();
    }
    for (const Dependency& d : w.deps) d.stream->wait(d.seq);
    // A poisoned context runs nothing more; the work still "completes" so
    // that waiters wake up and see the sticky error.
    if (state().sticky.load(std::memory_order_acquire) == CUDA_SUCCESS && w.run) {
      if (CUresult e = w.run()) raise_sticky_error(e);
    }
    w = Work{};  // release what the work held before announcing completion
    std::lock_guard lock(mu_);
    ++completed_;
    done_cv_.notify_all();
  }
  std::lock_guard lock(registry().mu);
  registry().live.erase(this);
}

CUresult resolve_stream(CUstream h, bool per_thread_default, Context* ctx, StreamPtr* out) {
  if (h == nullptr) {
    *out = per_thread_default ? per_thread_stream(ctx) : legacy_stream(ctx);
    return CUDA_SUCCESS;
  }
  if (h == CU_STREAM_LEGACY) {
    *out = legacy_stream(ctx);
    return CUDA_SUCCESS;
  }
  if (h == CU_STREAM_PER_THREAD) {
    *out = per_thread_stream(ctx);
    return CUDA_SUCCESS;
  }
  std::lock_guard lock(registry().mu);
  auto it = registry().live.find(reinterpret_cast<Stream*>(h));
  if (it == registry().live.end() || it->second->kind() != StreamKind::kCreated || it->second->stopping())
    return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult create_stream(Context* ctx, unsigned flags, int priority, CUstream* out) {
  StreamPtr s = Stream::create(ctx, StreamKind::kCreated, flags, priority);
  register_stream(s);
  *out = reinterpret_cast<CUstream>(s.get());
  return CUDA_SUCCESS;
}

CUresult destroy_stream(CUstream h) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;
  StreamPtr s;
  {
    std::lock_guard lock(registry().mu);
    auto it = registry().live.find(reinterpret_cast<Stream*>(h));
    if (it == registry().live.end() || it->second->kind() != StreamKind::kCreated || it->second->stopping())
      return CUDA_ERROR_INVALID_HANDLE;
    s = it->second;
  }
  // Work already queued still runs; the handle is gone at once.
  s->drain_and_stop();
  return CUDA_SUCCESS;
}

std::vector<StreamPtr> live_streams(Context* ctx) {
  std::vector<StreamPtr> out;
  std::lock_guard lock(registry().mu);
  for (auto& [p, s] : registry().live)
    if (!ctx || s->context() == ctx) out.push_back(s);
  return out;
}

CUresult submit(const StreamPtr& s, Work w, uint64_t* seq) {
  CUresult captured = CUDA_SUCCESS;
  if (capture_work(s, w, &captured)) {
    if (seq) *seq = 0;
    return captured;
  }
  if (s->kind() == StreamKind::kLegacyDefault) {
    if (CUresult e = refuse_legacy_during_capture(s->context())) return e;
  }
  // The legacy NULL stream waits for all blocking streams and they wait for it.
  if (s->kind() == StreamKind::kLegacyDefault) {
    for (auto& t : live_streams(s->context()))
      if (t != s && t->blocking()) w.deps.push_back({t, t->submitted()});
  } else if (s->blocking()) {
    StreamPtr legacy = legacy_stream(s->context());
    w.deps.push_back({legacy, legacy->submitted()});
  }
  uint64_t n = s->enqueue(std::move(w));
  if (seq) *seq = n;
  return CUDA_SUCCESS;
}

CUresult synchronize_context(Context* ctx) {
  for (auto& s : live_streams(ctx)) s->wait(s->submitted());
  return static_cast<CUresult>(state().sticky.load());
}

}  // namespace simdev
