// Stream capture: a capture sequence spans its origin stream and every stream
// joined into it through an event recorded in the capture; the capture modes
// decide which potentially unsafe calls are refused; what a capture cannot
// express is refused with the driver's errors and invalidates the capture.
#pragma once

#include <thread>

#include "event.h"
#include "graph.h"

namespace simdev {

struct CaptureSequence {
  unsigned long long id = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;  // the thread that began it
  GraphHandle* graph = nullptr;
  bool user_graph = false;  // cuStreamBeginCaptureToGraph: the caller owns the graph
  bool invalidated = false;
  StreamPtr origin;
  std::vector<StreamPtr> members;  // origin first, then joined streams
};

CUresult capture_begin(const StreamPtr& s, CUstreamCaptureMode mode, CUgraph into, const CUgraphNode* deps,
                       size_t ndeps);
CUresult capture_end(const StreamPtr& s, CUgraph* out);

// Work submitted to a capturing stream becomes a node; true when `s` is
// capturing (then *result is what the submission returns).
bool capture_work(const StreamPtr& s, const Work& w, CUresult* result);
// cuMemAllocAsync / cuMemFreeAsync on a capturing stream: memory nodes.
bool capture_alloc(const StreamPtr& s, uint64_t ptr, CUresult* result);
bool capture_free(const StreamPtr& s, uint64_t ptr, CUresult* result);
// cuEventRecord into a capturing stream marks the stream's current nodes.
bool capture_record_event(const StreamPtr& s, EventMark& mark, CUresult* result);
// cuStreamWaitEvent: joins `s` into the capture the event was recorded in,
// or refuses a dependency that crosses the capture boundary.
bool capture_wait_event(const StreamPtr& s, const EventMark* mark, CUresult* result);
// An event last recorded in a capture cannot be queried, synchronised or
// timed: true, and the capture is invalidated (NVIDIA's driver 580 ends
// such a capture with STREAM_CAPTURE_INVALIDATED, even a relaxed one).
bool refuse_captured_event(const EventMark* mark);

// Work on the legacy stream while a blocking stream of its context captures.
CUresult refuse_legacy_during_capture(Context* ctx);
// Synchronising or querying a capturing stream.
CUresult refuse_if_capturing(const StreamPtr& s);
// cuCtxSynchronize would wait for a capturing stream of the context.
CUresult refuse_context_sync_during_capture(Context* ctx);
// A potentially unsafe call (cuMemAlloc, cuMemFree, synchronous copies...),
// as the calling thread's capture mode and the open captures decide.
CUresult refuse_unsafe_call();

CUstreamCaptureMode exchange_thread_capture_mode(CUstreamCaptureMode mode);

struct CaptureInfo {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  unsigned long long id = 0;
  CUgraph graph = nullptr;
  const CUgraphNode* deps = nullptr;
  size_t ndeps = 0;
};
CUresult capture_info(const StreamPtr& s, CaptureInfo* out);

}  // namespace simdev
