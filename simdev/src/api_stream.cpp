// Streams, host functions on streams, and stream capture.
#include "capture.h"
#include "state.h"
#include "stream.h"

using namespace simdev;

namespace {

constexpr int kLeastPriority = 0, kGreatestPriority = -5;

CUresult stream_sync(Context* ctx, CUstream h, bool ptsz) {
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  if (CUresult e = refuse_if_capturing(s)) return e;
  s->wait(s->submitted());
  return static_cast<CUresult>(state().sticky.load());
}

CUresult stream_query(Context* ctx, CUstream h, bool ptsz) {
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  if (CUresult e = refuse_if_capturing(s)) return e;
  if (int e = state().sticky.load()) return static_cast<CUresult>(e);
  return s->reached(s->submitted()) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult wait_event(Context* ctx, CUstream h, CUevent ev, unsigned flags, bool ptsz) {
  if (flags & ~CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  Event* event = find_event(ev);
  if (!event) return CUDA_ERROR_INVALID_HANDLE;
  auto mark = event->current();
  CUresult captured = CUDA_SUCCESS;
  if (capture_wait_event(s, mark.get(), &captured)) return captured;
  Work w;
  if (mark && mark->seq) w.deps.push_back({mark->stream, mark->seq});
  w.run = [] { return CUDA_SUCCESS; };
  return submit(s, std::move(w));
}

CUresult host_func(Context* ctx, CUstream h, CUhostFn fn, void* data, bool ptsz) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  Work w;
  w.node_type = CU_GRAPH_NODE_TYPE_HOST;
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
  w.node_type = CU_GRAPH_NODE_TYPE_HOST;
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

CUresult begin_capture(Context* ctx, CUstream h, CUstreamCaptureMode mode, bool ptsz, CUgraph into = nullptr,
                       const CUgraphNode* deps = nullptr, size_t ndeps = 0) {
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  return capture_begin(s, mode, into, deps, ndeps);
}

CUresult end_capture(Context* ctx, CUstream h, CUgraph* graph, bool ptsz) {
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  return capture_end(s, graph);
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

SIMDEV_API CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream h, CUgraph graph, const CUgraphNode* deps,
                                                       const CUgraphEdgeData* edges, size_t ndeps,
                                                       CUstreamCaptureMode mode) {
  SIMDEV_ENTER_CTX("cuStreamBeginCaptureToGraph", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)edges;  // edge data only annotates dependencies
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  return begin_capture(ctx, h, mode, false, graph, deps, ndeps);
}
SIMDEV_API CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream h, CUgraph graph, const CUgraphNode* deps,
                                                            const CUgraphEdgeData* edges, size_t ndeps,
                                                            CUstreamCaptureMode mode) {
  SIMDEV_ENTER_CTX("cuStreamBeginCaptureToGraph", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)edges;
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  return begin_capture(ctx, h, mode, true, graph, deps, ndeps);
}

SIMDEV_API CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  SIMDEV_ENTER("cuThreadExchangeStreamCaptureMode", CUDA_ERROR_INVALID_VALUE);
  if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
    return CUDA_ERROR_INVALID_VALUE;
  *mode = exchange_thread_capture_mode(*mode);
  return CUDA_SUCCESS;
}

namespace {
CUresult report_capture(Context* ctx, CUstream h, bool ptsz, CUstreamCaptureStatus* status, cuuint64_t* id,
                      CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* ndeps) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  CaptureInfo info;
  if (CUresult e = simdev::capture_info(s, &info)) return e;
  *status = info.status;
  // The rest is defined only while the capture is active.
  if (info.status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_SUCCESS;
  if (id) *id = info.id;
  if (graph) *graph = info.graph;
  if (deps) *deps = info.deps;
  if (edges) *edges = nullptr;  // no edge carries data: the documented NULL
  if (ndeps) *ndeps = info.ndeps;
  return CUDA_SUCCESS;
}

CUresult is_capturing(Context* ctx, CUstream h, bool ptsz, CUstreamCaptureStatus* status) {
  return report_capture(ctx, h, ptsz, status, nullptr, nullptr, nullptr, nullptr, nullptr);
}
}  // namespace

SIMDEV_API CUresult CUDAAPI cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* status) {
  SIMDEV_ENTER_CTX("cuStreamIsCapturing", CUDA_ERROR_INVALID_HANDLE, ctx);
  return is_capturing(ctx, h, false, status);
}
SIMDEV_API CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus* status) {
  SIMDEV_ENTER_CTX("cuStreamIsCapturing", CUDA_ERROR_INVALID_HANDLE, ctx);
  return is_capturing(ctx, h, true, status);
}

SIMDEV_API CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                      CUgraph* graph, const CUgraphNode** deps, size_t* ndeps) {
  SIMDEV_ENTER_CTX("cuStreamGetCaptureInfo_v2", CUDA_ERROR_INVALID_VALUE, ctx);
  return report_capture(ctx, h, false, status, id, graph, deps, nullptr, ndeps);
}
SIMDEV_API CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                           CUgraph* graph, const CUgraphNode** deps, size_t* ndeps) {
  SIMDEV_ENTER_CTX("cuStreamGetCaptureInfo_v2", CUDA_ERROR_INVALID_VALUE, ctx);
  return report_capture(ctx, h, true, status, id, graph, deps, nullptr, ndeps);
}
SIMDEV_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                      CUgraph* graph, const CUgraphNode** deps,
                                                      const CUgraphEdgeData** edges, size_t* ndeps) {
  SIMDEV_ENTER_CTX("cuStreamGetCaptureInfo_v3", CUDA_ERROR_INVALID_VALUE, ctx);
  return report_capture(ctx, h, false, status, id, graph, deps, edges, ndeps);
}
SIMDEV_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                           CUgraph* graph, const CUgraphNode** deps,
                                                           const CUgraphEdgeData** edges, size_t* ndeps) {
  SIMDEV_ENTER_CTX("cuStreamGetCaptureInfo_v3", CUDA_ERROR_INVALID_VALUE, ctx);
  return report_capture(ctx, h, true, status, id, graph, deps, edges, ndeps);
}
