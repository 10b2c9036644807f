// Events: record, query, synchronise, elapsed time.
#include <chrono>
#include <thread>
#include <unordered_set>

#include "capture.h"
#include "event.h"
#include "state.h"

using namespace simdev;

namespace {

struct EventTable {
  std::mutex mu;
  std::unordered_set<Event*> live;
};

EventTable& events() {
  static EventTable* t = new EventTable;
  return *t;
}

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

CUresult record(Context* ctx, CUevent ev, CUstream h, bool ptsz) {
  Event* e = find_event(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, ctx, &s)) return r;
  // The event and the stream must be in the same context (CUDA Driver API,
  // Event Management, cuEventRecord: CUDA_ERROR_INVALID_HANDLE otherwise).
  if (e->ctx != s->context()) return CUDA_ERROR_INVALID_HANDLE;
  auto mark = std::make_shared<EventMark>();
  mark->stream = s;
  CUresult captured = CUDA_SUCCESS;
  if (capture_record_event(s, *mark, &captured)) {
    if (captured) return captured;
    std::lock_guard lock(e->mu);
    e->mark = std::move(mark);
    return CUDA_SUCCESS;
  }
  Work w;
  w.run = [mark] {
    mark->ns.store(now_ns());
    return CUDA_SUCCESS;
  };
  uint64_t seq = 0;
  if (CUresult r = submit(s, std::move(w), &seq)) return r;
  mark->seq = seq;
  std::lock_guard lock(e->mu);
  e->mark = std::move(mark);
  return CUDA_SUCCESS;
}

bool complete(const std::shared_ptr<EventMark>& m) { return !m || !m->seq || m->stream->reached(m->seq); }

}  // namespace

namespace simdev {
Event* find_event(CUevent ev) {
  std::lock_guard lock(events().mu);
  auto* e = reinterpret_cast<Event*>(ev);
  return events().live.count(e) ? e : nullptr;
}
}  // namespace simdev

SIMDEV_API CUresult CUDAAPI cuEventCreate(CUevent* out, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuEventCreate", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  constexpr unsigned kKnown = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (!out || (flags & ~kKnown)) return CUDA_ERROR_INVALID_VALUE;
  // Interprocess events must not time, as the driver requires.
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new Event;
  e->flags = flags;
  e->ctx = ctx;
  std::lock_guard lock(events().mu);
  events().live.insert(e);
  *out = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuEventDestroy_v2(CUevent ev) {
  SIMDEV_ENTER_CTX("cuEventDestroy_v2", CUDA_ERROR_INVALID_HANDLE, ctx);
  (void)ctx;
  Event* e = nullptr;
  {
    std::lock_guard lock(events().mu);
    e = reinterpret_cast<Event*>(ev);
    if (!events().live.erase(e)) return CUDA_ERROR_INVALID_HANDLE;
  }
  delete e;  // pending waits hold the mark, not the event
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuEventRecord(CUevent ev, CUstream h) {
  SIMDEV_ENTER_CTX("cuEventRecord", CUDA_ERROR_INVALID_HANDLE, ctx);
  return record(ctx, ev, h, false);
}
SIMDEV_API CUresult CUDAAPI cuEventRecord_ptsz(CUevent ev, CUstream h) {
  SIMDEV_ENTER_CTX("cuEventRecord", CUDA_ERROR_INVALID_HANDLE, ctx);
  return record(ctx, ev, h, true);
}
SIMDEV_API CUresult CUDAAPI cuEventRecordWithFlags(CUevent ev, CUstream h, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuEventRecordWithFlags", CUDA_ERROR_INVALID_HANDLE, ctx);
  if (flags & ~CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  return record(ctx, ev, h, false);
}
SIMDEV_API CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent ev, CUstream h, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuEventRecordWithFlags", CUDA_ERROR_INVALID_HANDLE, ctx);
  if (flags & ~CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  return record(ctx, ev, h, true);
}

SIMDEV_API CUresult CUDAAPI cuEventQuery(CUevent ev) {
  SIMDEV_ENTER_CTX("cuEventQuery", CUDA_ERROR_INVALID_HANDLE, ctx);
  (void)ctx;
  Event* e = find_event(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  auto m = e->current();
  if (refuse_captured_event(m.get())) return CUDA_ERROR_CAPTURED_EVENT;
  return complete(m) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIMDEV_API CUresult CUDAAPI cuEventSynchronize(CUevent ev) {
  SIMDEV_ENTER_CTX("cuEventSynchronize", CUDA_ERROR_INVALID_HANDLE, ctx);
  (void)ctx;
  Event* e = find_event(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  auto m = e->current();
  if (refuse_captured_event(m.get())) return CUDA_ERROR_CAPTURED_EVENT;
  if (m && m->seq) m->stream->wait(m->seq);
  return static_cast<CUresult>(state().sticky.load());
}

SIMDEV_API CUresult CUDAAPI cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  SIMDEV_ENTER_CTX("cuEventElapsedTime_v2", CUDA_ERROR_INVALID_HANDLE, ctx);
  (void)ctx;
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  Event* a = find_event(start);
  Event* b = find_event(end);
  if (!a || !b) return CUDA_ERROR_INVALID_HANDLE;
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  // Events of two devices have no common clock (CUDA Programming Guide,
  // Multi-Device System, Stream and Event Behavior; the code is UNCONFIRMED).
  if (a->ctx->device != b->ctx->device) return CUDA_ERROR_INVALID_HANDLE;
  auto ma = a->current(), mb = b->current();
  if (!ma || !mb) return CUDA_ERROR_INVALID_HANDLE;  // never recorded
  if (refuse_captured_event(ma.get()) | refuse_captured_event(mb.get())) return CUDA_ERROR_CAPTURED_EVENT;
  if (!complete(ma) || !complete(mb)) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>(static_cast<double>(mb->ns.load() - ma->ns.load()) / 1e6);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(ms, start, end);
}
