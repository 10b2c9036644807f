// Stream capture, the events that join side streams to a capture, a
// stream's destruction, and synchronisation, told to the engine. While a
// stream captures, nothing of tierrt's is recorded into it and nothing it
// names moves; a global-mode capture holds every move in the process from
// before it begins. Before a stream may join a capture (a wait while some
// capture is open) or goes away, its pending lazy uses are recorded on it.
#include "hooks.h"
#include "engine_dispatch.h"
#include "runtime/engine.h"

using namespace tierrt;
using namespace tierrt::preload;

namespace {

// The driver's call, innermost, goes through the capture gate: no probe of
// tierrt's straddles a capture's beginning (Engine::gated_begin).
template <class Forward>
CUresult begin_capture(CUstream s, CUstreamCaptureMode mode, Forward&& forward) noexcept {
  auto gated = [&] { return Engine::gated_begin(forward); };
  return through_engines([&](Engine& e, auto& next) { return e.begin_capture(s, mode, next); }, gated);
}

}  // namespace

extern "C" {

#define TIERRT_SAME_(s) (s)
#define TIERRT_BEGIN_CAPTURE_(name, stream_of)                                                          \
  CUresult name(CUstream s, CUstreamCaptureMode mode) {                                                 \
    return begin_capture(stream_of(s), mode, [&] { return TIERRT_REAL(name, cuStreamBeginCapture_v2)(s, mode); }); \
  }
TIERRT_BEGIN_CAPTURE_(cuStreamBeginCapture_v2, TIERRT_SAME_)
TIERRT_BEGIN_CAPTURE_(cuStreamBeginCapture_v2_ptsz, ptsz)

// CUDA 10.0's form has no mode: its captures are global.
#define TIERRT_BEGIN_CAPTURE_V1_(name, stream_of)                                                 \
  CUresult name(CUstream s) {                                                                     \
    auto real = TIERRT_REAL(name, cuStreamBeginCapture);                                          \
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;                                                   \
    return begin_capture(stream_of(s), CU_STREAM_CAPTURE_MODE_GLOBAL, [&] { return real(s); });   \
  }
TIERRT_BEGIN_CAPTURE_V1_(cuStreamBeginCapture, TIERRT_SAME_)
TIERRT_BEGIN_CAPTURE_V1_(cuStreamBeginCapture_ptsz, ptsz)

#define TIERRT_BEGIN_CAPTURE_TO_GRAPH_(name, stream_of)                                               \
  CUresult name(CUstream s, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* edges, size_t n, \
                CUstreamCaptureMode mode) {                                                           \
    auto real = TIERRT_REAL(name, cuStreamBeginCaptureToGraph);                                       \
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;                                                       \
    return begin_capture(stream_of(s), mode, [&] { return real(s, g, deps, edges, n, mode); });       \
  }
TIERRT_BEGIN_CAPTURE_TO_GRAPH_(cuStreamBeginCaptureToGraph, TIERRT_SAME_)
TIERRT_BEGIN_CAPTURE_TO_GRAPH_(cuStreamBeginCaptureToGraph_ptsz, ptsz)

#define TIERRT_END_CAPTURE_(name, stream_of)                                           \
  CUresult name(CUstream s, CUgraph* graph) {                                          \
    auto forward = [&] {                                                               \
      auto end = [&] { return TIERRT_REAL(name, cuStreamEndCapture)(s, graph); };      \
      return Engine::gated_end(stream_of(s), end);                                      \
    };                                                                                 \
    return through_engines([&](Engine& e, auto& next) { return e.end_capture(stream_of(s), graph, next); }, forward); \
  }
TIERRT_END_CAPTURE_(cuStreamEndCapture, TIERRT_SAME_)
TIERRT_END_CAPTURE_(cuStreamEndCapture_ptsz, ptsz)

// An event recorded into a capture joins the streams that wait on it.
#define TIERRT_EVENT_RECORD_(name, stream_of)                                         \
  CUresult name(CUevent ev, CUstream s) {                                             \
    const CUresult r = TIERRT_REAL(name, cuEventRecord)(ev, s);                       \
    if (r == CUDA_SUCCESS) each_engine([&](Engine& e) { e.note_event_record(ev, stream_of(s)); }); \
    return r;                                                                         \
  }
TIERRT_EVENT_RECORD_(cuEventRecord, TIERRT_SAME_)
TIERRT_EVENT_RECORD_(cuEventRecord_ptsz, ptsz)

#define TIERRT_EVENT_RECORD_FLAGS_(name, stream_of)                                   \
  CUresult name(CUevent ev, CUstream s, unsigned flags) {                             \
    const CUresult r = TIERRT_REAL(name, cuEventRecordWithFlags)(ev, s, flags);       \
    if (r == CUDA_SUCCESS) each_engine([&](Engine& e) { e.note_event_record(ev, stream_of(s)); }); \
    return r;                                                                         \
  }
TIERRT_EVENT_RECORD_FLAGS_(cuEventRecordWithFlags, TIERRT_SAME_)
TIERRT_EVENT_RECORD_FLAGS_(cuEventRecordWithFlags_ptsz, ptsz)

#define TIERRT_STREAM_WAIT_(name, stream_of)                                          \
  CUresult name(CUstream s, CUevent ev, unsigned flags) {                             \
    each_engine([&](Engine& e) { e.before_stream_wait(stream_of(s)); });              \
    auto wait = [&] { return TIERRT_REAL(name, cuStreamWaitEvent)(s, ev, flags); };   \
    const CUresult r = Engine::gated_wait(wait);                                      \
    if (r == CUDA_SUCCESS) each_engine([&](Engine& e) { e.note_stream_wait(stream_of(s), ev); }); \
    return r;                                                                         \
  }
TIERRT_STREAM_WAIT_(cuStreamWaitEvent, TIERRT_SAME_)
TIERRT_STREAM_WAIT_(cuStreamWaitEvent_ptsz, ptsz)

CUresult cuStreamDestroy_v2(CUstream s) {
  each_engine([&](Engine& e) { e.stream_destroyed(s); });
  return TIERRT_REAL(cuStreamDestroy_v2, cuStreamDestroy_v2)(s);
}

// Synchronisation points: what the policy learns the step's shape from.
CUresult cuCtxSynchronize() {
  CUresult r = TIERRT_REAL(cuCtxSynchronize, cuCtxSynchronize)();
  if (Engine* e = engine_here(); e && r == CUDA_SUCCESS) e->note_sync(nullptr, true);
  return r;
}

#define TIERRT_STREAM_SYNC_(name, stream_of)                              \
  CUresult name(CUstream s) {                                             \
    CUresult r = TIERRT_REAL(name, cuStreamSynchronize)(s);               \
    if (Engine* e = engine_here(); e && r == CUDA_SUCCESS) e->note_sync(stream_of(s), false); \
    return r;                                                             \
  }
TIERRT_STREAM_SYNC_(cuStreamSynchronize, TIERRT_SAME_)
TIERRT_STREAM_SYNC_(cuStreamSynchronize_ptsz, ptsz)

}  // extern "C"
