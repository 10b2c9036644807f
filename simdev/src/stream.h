// Streams: each runs its work in order on a worker thread of its own, so
// different streams run concurrently, as on a GPU. Work may depend on other
// streams' progress (events, cuStreamWaitEvent, the legacy NULL stream's
// implicit synchronisation), expressed as "stream S has completed item n".
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common.h"

namespace simdev {

struct Context;
class Stream;
using StreamPtr = std::shared_ptr<Stream>;

struct Dependency {
  StreamPtr stream;
  uint64_t seq;  // satisfied once stream has completed this many items
};

// A kernel launch as recorded, so captured graphs can be inspected.
struct KernelRecord {
  CUfunction function = nullptr;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, shared_bytes = 0;
  std::vector<unsigned char> params;  // the packed parameter buffer
};

struct Work {
  std::function<CUresult()> run;  // executed on the worker; an error poisons the context
  std::vector<Dependency> deps;
  std::shared_ptr<const KernelRecord> kernel;  // set for kernel launches
  // What the work becomes when a capturing stream records it into a graph.
  CUgraphNodeType node_type = CU_GRAPH_NODE_TYPE_EMPTY;
};

struct CaptureSequence;

// A stream's part in a capture sequence (guarded by graph_mutex()): the
// sequence it belongs to and the nodes its next captured work depends on.
struct StreamCapture {
  std::shared_ptr<CaptureSequence> sequence;
  std::vector<size_t> frontier;
  std::vector<CUgraphNode> reported;  // what cuStreamGetCaptureInfo last handed out
};

enum class StreamKind { kCreated, kLegacyDefault, kPerThreadDefault };

class Stream : public std::enable_shared_from_this<Stream> {
 public:
  static StreamPtr create(Context* ctx, StreamKind kind, unsigned flags, int priority);
  ~Stream();

  Context* context() const { return ctx_; }
  StreamKind kind() const { return kind_; }
  unsigned flags() const { return flags_; }
  int priority() const { return priority_; }
  unsigned long long id() const { return id_; }
  bool blocking() const { return !(flags_ & CU_STREAM_NON_BLOCKING); }

  uint64_t enqueue(Work w);        // returns the item's sequence number
  uint64_t submitted();            // items enqueued so far
  bool reached(uint64_t seq);      // items 1..seq have completed
  void wait(uint64_t seq);
  // The handle is gone; queued work still runs, then the worker leaves the
  // registry (so context synchronisation still waits for that work).
  void drain_and_stop();
  bool stopping();

  StreamCapture capture;  // guarded by graph_mutex()

 private:
  Stream(Context* ctx, StreamKind kind, unsigned flags, int priority);
  void worker_loop();

  Context* ctx_;
  StreamKind kind_;
  unsigned flags_;
  int priority_;
  unsigned long long id_;

  std::mutex mu_;
  // Two conditions apart: the worker waits for work, other threads for
  // completion. With one variable for both, every enqueue woke each thread
  // waiting for the stream's completion (another stream's worker held by a
  // dependency on it, a synchronize) through a system call, only for it to
  // sleep again: a launch cost the launching thread that system call, a
  // cost of simdev's own that no figure measured on it should carry.
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<Work> queue_;
  uint64_t submitted_ = 0, completed_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

// ---- the registry of streams, and the legacy/per-thread defaults ----

// Turns an API stream handle into a stream. `per_thread_default` is true for
// the _ptsz entry points, where the NULL stream means the per-thread stream.
CUresult resolve_stream(CUstream h, bool per_thread_default, Context* ctx, StreamPtr* out);
CUresult create_stream(Context* ctx, unsigned flags, int priority, CUstream* out);
CUresult destroy_stream(CUstream h);

// Adds the dependencies the legacy default stream implies, then enqueues (or
// records into a graph, when the stream is capturing: capture.h).
CUresult submit(const StreamPtr& s, Work w, uint64_t* seq = nullptr);

// The device whose work the calling stream worker runs (0 on other threads):
// a kernel runs on its stream's context's device.
int worker_device();

// Waits for everything enqueued so far on every stream of `ctx` (all when null).
CUresult synchronize_context(Context* ctx);
// The live streams of `ctx` (all when null).
std::vector<StreamPtr> live_streams(Context* ctx);

}  // namespace simdev
