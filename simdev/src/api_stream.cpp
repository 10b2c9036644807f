// Streams, host functions on streams, and stream capture.
#include "event.h"
#include "state.h"
#include "stream.h"

using namespace simdev;

namespace {

constexpr int kLeastPriority = 0, kGreatestPriority = -5;

// Waiting on or querying a capturing stream is refused and ends the capture.
CUresult refuse_if_capturing(Stream& s) {
  std::lock_guard c(s.capture_mu);
  if (s.capture.status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_SUCCESS;
  s.capture.status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult stream_sync(Context* ctx, CUstream h, bool ptsz) {
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  if (CUresult e = refuse_if_capturing(*s)) return e;
  s->wait(s->submitted());
  return static_cast<CUresult>(state().sticky.load());
}

CUresult stream_query(Context* ctx, CUstream h, bool ptsz) {
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  if (CUresult e = refuse_if_capturing(*s)) return e;
  if (int e = state().sticky.load()) return static_cast<CUresult>(e);
  return s->reached(s->submitted()) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult wait_event(Context* ctx, CUstream h, CUevent ev, unsigned flags, bool ptsz) {
  if (flags & ~CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  Event* event = find_event(ev);
  if (!event) return CUDA_ERROR_INVALID_HANDLE;
  Work w;
  if (auto mark = event->current(); mark && mark->seq) w.deps.push_back({mark->stream, mark->seq});
  w.run = [] { return CUDA_SUCCESS; };
  return submit(s, std::move(w));
}

CUresult host_func(Context* ctx, CUstream h, CUhostFn fn, void* data, bool ptsz) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  Work w;
  w.run = [fn, data] {
    fn(data);
    return CUDA_SUCCESS;
  };
  return submit(s, std::move(w));
}

CUresult add_callback(Context* ctx, CUstream h, CUstreamCallback cb, void* data, unsigned flags, bool ptsz) {
  if (!cb || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  Work w;
  w.run = [cb, data, h] {
    cb(h, CUDA_SUCCESS, data);
    return CUDA_SUCCESS;
  };
  return submit(s, std::move(w));
}

template <typename F>
CUresult with_stream(Context* ctx, CUstream h, bool ptsz, F&& f) {
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  return f(*s);
}

CUresult begin_capture(Context* ctx, CUstream h, CUstreamCaptureMode mode, bool ptsz) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  if (s->kind() == StreamKind::kLegacyDefault) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  static std::atomic<unsigned long long> next_id{1};
  std::lock_guard c(s->capture_mu);
  if (s->capture.status != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  s->capture.status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  s->capture.mode = mode;
  s->capture.graph = std::make_shared<Graph>();
  s->capture.id = next_id++;
  return CUDA_SUCCESS;
}

CUresult end_capture(Context* ctx, CUstream h, CUgraph* graph, bool ptsz) {
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  std::lock_guard c(s->capture_mu);
  Stream::Capture cap = std::move(s->capture);
  s->capture = Stream::Capture{};
  if (cap.status == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  if (cap.status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    *graph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *graph = reinterpret_cast<CUgraph>(new_graph(std::move(cap.graph)));
  return CUDA_SUCCESS;
}

}  // namespace

SIMDEV_API CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* out, unsigned int flags, int priority) {
  SIMDEV_ENTER_CTX("cuStreamCreateWithPriority", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  if (!out || (flags & ~CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  // Out-of-range priorities are clamped, as the driver does.
  priority = std::min(kLeastPriority, std::max(kGreatestPriority, priority));
  return create_stream(ctx, flags, priority, out);
}

SIMDEV_API CUresult CUDAAPI cuStreamCreate(CUstream* out, unsigned int flags) {
  return cuStreamCreateWithPriority(out, flags, kLeastPriority);
}

SIMDEV_API CUresult CUDAAPI cuStreamDestroy_v2(CUstream h) {
  SIMDEV_ENTER_CTX("cuStreamDestroy_v2", CUDA_ERROR_INVALID_HANDLE, ctx);
  (void)ctx;
  return destroy_stream(h);
}

SIMDEV_API CUresult CUDAAPI cuStreamSynchronize(CUstream h) {
  SIMDEV_ENTER_CTX("cuStreamSynchronize", CUDA_ERROR_INVALID_HANDLE, ctx);
  return stream_sync(ctx, h, false);
}
SIMDEV_API CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream h) {
  SIMDEV_ENTER_CTX("cuStreamSynchronize", CUDA_ERROR_INVALID_HANDLE, ctx);
  return stream_sync(ctx, h, true);
}

SIMDEV_API CUresult CUDAAPI cuStreamQuery(CUstream h) {
  SIMDEV_ENTER_CTX("cuStreamQuery", CUDA_ERROR_INVALID_HANDLE, ctx);
  return stream_query(ctx, h, false);
}
SIMDEV_API CUresult CUDAAPI cuStreamQuery_ptsz(CUstream h) {
  SIMDEV_ENTER_CTX("cuStreamQuery", CUDA_ERROR_INVALID_HANDLE, ctx);
  return stream_query(ctx, h, true);
}

SIMDEV_API CUresult CUDAAPI cuStreamWaitEvent(CUstream h, CUevent ev, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuStreamWaitEvent", CUDA_ERROR_INVALID_HANDLE, ctx);
  return wait_event(ctx, h, ev, flags, false);
}
SIMDEV_API CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream h, CUevent ev, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuStreamWaitEvent", CUDA_ERROR_INVALID_HANDLE, ctx);
  return wait_event(ctx, h, ev, flags, true);
}

SIMDEV_API CUresult CUDAAPI cuLaunchHostFunc(CUstream h, CUhostFn fn, void* data) {
  SIMDEV_ENTER_CTX("cuLaunchHostFunc", CUDA_ERROR_INVALID_VALUE, ctx);
  return host_func(ctx, h, fn, data, false);
}
SIMDEV_API CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void* data) {
  SIMDEV_ENTER_CTX("cuLaunchHostFunc", CUDA_ERROR_INVALID_VALUE, ctx);
  return host_func(ctx, h, fn, data, true);
}

SIMDEV_API CUresult CUDAAPI cuStreamAddCallback(CUstream h, CUstreamCallback cb, void* data, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuStreamAddCallback", CUDA_ERROR_INVALID_VALUE, ctx);
  return add_callback(ctx, h, cb, data, flags, false);
}
SIMDEV_API CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback cb, void* data, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuStreamAddCallback", CUDA_ERROR_INVALID_VALUE, ctx);
  return add_callback(ctx, h, cb, data, flags, true);
}

#define SIMDEV_STREAM_GETTER(name, site, out_t, ptsz, expr)                  \
  SIMDEV_API CUresult CUDAAPI name(CUstream h, out_t* out) {                 \
    SIMDEV_ENTER_CTX(site, CUDA_ERROR_INVALID_HANDLE, ctx);                  \
    if (!out) return CUDA_ERROR_INVALID_VALUE;                               \
    return with_stream(ctx, h, ptsz, [&](Stream& s) {                        \
      *out = (expr);                                                         \
      return CUDA_SUCCESS;                                                   \
    });                                                                      \
  }

SIMDEV_STREAM_GETTER(cuStreamGetPriority, "cuStreamGetPriority", int, false, s.priority())
SIMDEV_STREAM_GETTER(cuStreamGetPriority_ptsz, "cuStreamGetPriority", int, true, s.priority())
SIMDEV_STREAM_GETTER(cuStreamGetFlags, "cuStreamGetFlags", unsigned int, false, s.flags())
SIMDEV_STREAM_GETTER(cuStreamGetFlags_ptsz, "cuStreamGetFlags", unsigned int, true, s.flags())
SIMDEV_STREAM_GETTER(cuStreamGetId, "cuStreamGetId", unsigned long long, false, s.id())
SIMDEV_STREAM_GETTER(cuStreamGetId_ptsz, "cuStreamGetId", unsigned long long, true, s.id())
SIMDEV_STREAM_GETTER(cuStreamGetCtx, "cuStreamGetCtx", CUcontext, false, reinterpret_cast<CUcontext>(s.context()))
SIMDEV_STREAM_GETTER(cuStreamGetCtx_ptsz, "cuStreamGetCtx", CUcontext, true, reinterpret_cast<CUcontext>(s.context()))
SIMDEV_STREAM_GETTER(cuStreamGetDevice, "cuStreamGetDevice", CUdevice, false, s.context()->device)
SIMDEV_STREAM_GETTER(cuStreamGetDevice_ptsz, "cuStreamGetDevice", CUdevice, true, s.context()->device)

SIMDEV_API CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) {
  SIMDEV_ENTER_CTX("cuStreamBeginCapture_v2", CUDA_ERROR_INVALID_VALUE, ctx);
  return begin_capture(ctx, h, mode, false);
}
SIMDEV_API CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode) {
  SIMDEV_ENTER_CTX("cuStreamBeginCapture_v2", CUDA_ERROR_INVALID_VALUE, ctx);
  return begin_capture(ctx, h, mode, true);
}

SIMDEV_API CUresult CUDAAPI cuStreamEndCapture(CUstream h, CUgraph* graph) {
  SIMDEV_ENTER_CTX("cuStreamEndCapture", CUDA_ERROR_INVALID_VALUE, ctx);
  return end_capture(ctx, h, graph, false);
}
SIMDEV_API CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream h, CUgraph* graph) {
  SIMDEV_ENTER_CTX("cuStreamEndCapture", CUDA_ERROR_INVALID_VALUE, ctx);
  return end_capture(ctx, h, graph, true);
}

namespace {
CUstreamCaptureStatus capture_status(Stream& s) {
  std::lock_guard c(s.capture_mu);
  return s.capture.status;
}
}  // namespace

SIMDEV_STREAM_GETTER(cuStreamIsCapturing, "cuStreamIsCapturing", CUstreamCaptureStatus, false, capture_status(s))
SIMDEV_STREAM_GETTER(cuStreamIsCapturing_ptsz, "cuStreamIsCapturing", CUstreamCaptureStatus, true, capture_status(s))

namespace {
CUresult capture_info(Context* ctx, CUstream h, bool ptsz, CUstreamCaptureStatus* status, cuuint64_t* id,
                      CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* ndeps) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(ctx, h, ptsz, [&](Stream& s) {
    std::lock_guard c(s.capture_mu);
    *status = s.capture.status;
    if (id) *id = s.capture.id;
    if (graph) *graph = nullptr;  // node-level graph editing is not modelled
    if (deps) *deps = nullptr;
    if (edges) *edges = nullptr;
    if (ndeps) *ndeps = 0;
    return CUDA_SUCCESS;
  });
}
}  // namespace

SIMDEV_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                      CUgraph* graph, const CUgraphNode** deps,
                                                      const CUgraphEdgeData** edges, size_t* ndeps) {
  SIMDEV_ENTER_CTX("cuStreamGetCaptureInfo_v3", CUDA_ERROR_INVALID_VALUE, ctx);
  return capture_info(ctx, h, false, status, id, graph, deps, edges, ndeps);
}
SIMDEV_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                           CUgraph* graph, const CUgraphNode** deps,
                                                           const CUgraphEdgeData** edges, size_t* ndeps) {
  SIMDEV_ENTER_CTX("cuStreamGetCaptureInfo_v3", CUDA_ERROR_INVALID_VALUE, ctx);
  return capture_info(ctx, h, true, status, id, graph, deps, edges, ndeps);
}
