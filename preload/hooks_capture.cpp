// Stream capture and synchronisation, told to the engine once the driver
// did them. While a stream captures, nothing it touches is spilled or
// fetched, and blocks its captured launches name stay resident for good (the
// graph may replay them at any time without passing through a hook).
#include "hooks.h"
#include "runtime/engine.h"

using namespace tierrt;
using namespace tierrt::preload;

extern "C" {

#define TIERRT_SAME_(s) (s)
#define TIERRT_BEGIN_CAPTURE_(name, stream_of)                                  \
  CUresult name(CUstream s, CUstreamCaptureMode mode) {                         \
    CUresult r = TIERRT_REAL(name, cuStreamBeginCapture_v2)(s, mode);           \
    if (r == CUDA_SUCCESS)                                                      \
      if (Engine* e = Engine::active()) e->begin_capture(stream_of(s), mode);   \
    return r;                                                                   \
  }
TIERRT_BEGIN_CAPTURE_(cuStreamBeginCapture_v2, TIERRT_SAME_)
TIERRT_BEGIN_CAPTURE_(cuStreamBeginCapture_v2_ptsz, ptsz)

#define TIERRT_END_CAPTURE_(name, stream_of)                            \
  CUresult name(CUstream s, CUgraph* graph) {                           \
    if (Engine* e = Engine::active()) e->end_capture(stream_of(s));     \
    return TIERRT_REAL(name, cuStreamEndCapture)(s, graph);             \
  }
TIERRT_END_CAPTURE_(cuStreamEndCapture, TIERRT_SAME_)
TIERRT_END_CAPTURE_(cuStreamEndCapture_ptsz, ptsz)

// Synchronisation points: what the policy learns the step's shape from.
CUresult cuCtxSynchronize() {
  CUresult r = TIERRT_REAL(cuCtxSynchronize, cuCtxSynchronize)();
  if (Engine* e = Engine::active(); e && r == CUDA_SUCCESS) e->note_sync(nullptr, true);
  return r;
}

#define TIERRT_STREAM_SYNC_(name, stream_of)                              \
  CUresult name(CUstream s) {                                             \
    CUresult r = TIERRT_REAL(name, cuStreamSynchronize)(s);               \
    if (Engine* e = Engine::active(); e && r == CUDA_SUCCESS) e->note_sync(stream_of(s), false); \
    return r;                                                             \
  }
TIERRT_STREAM_SYNC_(cuStreamSynchronize, TIERRT_SAME_)
TIERRT_STREAM_SYNC_(cuStreamSynchronize_ptsz, ptsz)

}  // extern "C"
