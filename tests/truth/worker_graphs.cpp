// Graphs: kernels captured from a stream, instantiated, and replayed on any
// stream, ordered by events like every other use of their blocks.
#include <algorithm>
#include <cstdio>

#include "worker.h"

namespace truth {

namespace {

constexpr size_t kMaxGraphsPerThread = 2;

}  // namespace

// Captures one to three kernels on a non-blocking stream (thread-local or
// relaxed mode: other threads keep allocating meanwhile), instantiates the
// graph, and launches it. Nothing else happens on this thread during the
// capture, so no outside event enters it.
void Worker::op_capture() {
  if (!graphs_on_) return;
  if (graphs_.size() >= kMaxGraphsPerThread) destroy_graph(0);
  const int s = 1 + static_cast<int>(rand(kStreams - 1));
  const CUstreamCaptureMode mode = coin() ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL : CU_STREAM_CAPTURE_MODE_RELAXED;
  ++tally_.ops["capture"];
  const CUresult begun = d_.stream_begin_capture(handle(s), mode);
  if (begun == CUDA_ERROR_NOT_SUPPORTED) {
    graphs_on_ = false;
    std::fprintf(stderr, "random_program: thread %u: stream capture not supported; graphs off\n", index_);
    return;
  }
  if (!check(begun, Call::kBeginCapture)) return;
  Graph g{};
  for (uint64_t n = 1 + rand(3); n > 0; --n) {
    KernelOp op;
    if (!random_kernel(&op)) continue;
    if (check(launch(op, s), Call::kLaunchKernel)) g.kernels.push_back(op);
  }
  if (!check(d_.stream_end_capture(handle(s), &g.graph), Call::kEndCapture)) {
    // A failed End may leave the capture open: end it and drop the graph.
    // Another thread may have armed a fault at End again meanwhile (faults
    // are process-wide), so until the stream says it captures no more.
    for (int attempt = 0;; ++attempt) {
      CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
      if (d_.stream_is_capturing(handle(s), &status) != CUDA_SUCCESS) fatal("cuStreamIsCapturing failed");
      if (status == CU_STREAM_CAPTURE_STATUS_NONE) break;
      if (attempt == 8) fatal("cuStreamEndCapture keeps failing");
      CUgraph dropped = nullptr;
      if (check(d_.stream_end_capture(handle(s), &dropped), Call::kEndCapture) && dropped) d_.graph_destroy(dropped);
    }
    return;
  }
  if (!check(d_.graph_instantiate(&g.exec, g.graph, 0), Call::kGraphInstantiate)) {
    d_.graph_destroy(g.graph);
    return;
  }
  graphs_.push_back(std::move(g));
  launch_graph(graphs_.size() - 1);
}

void Worker::op_graph_launch() {
  if (graphs_.empty()) return;
  launch_graph(rand(graphs_.size()));
}

// The graph's kernels reach what they name now: a table it reads may have
// been rewritten since the capture.
void Worker::launch_graph(size_t g) {
  const Graph& graph = graphs_[g];
  const int s = pick_stream();
  std::vector<int> ids;
  for (const KernelOp& op : graph.kernels)
    for (int id : named(op)) ids.push_back(id);
  order_for(s, ids);
  used_on(s, ids);
  ++tally_.ops["graph-launch"];
  for (int id : ids) note(id, "graph launch on stream " + std::to_string(s));
  if (check(d_.graph_launch(graph.exec, handle(s)), Call::kGraphLaunch)) {
    for (const KernelOp& op : graph.kernels) apply(op);
  } else {
    for (const KernelOp& op : graph.kernels) mark_unknown(op);
  }
}

// The driver frees an executable graph still in flight once it completes.
void Worker::destroy_graph(size_t g) {
  if (d_.graph_exec_destroy(graphs_[g].exec) != CUDA_SUCCESS || d_.graph_destroy(graphs_[g].graph) != CUDA_SUCCESS)
    fatal("destroying a graph failed");
  graphs_.erase(graphs_.begin() + static_cast<std::ptrdiff_t>(g));
}

void Worker::destroy_graphs_naming(int id) {
  for (size_t g = graphs_.size(); g-- > 0;) {
    bool names = false;
    for (const KernelOp& op : graphs_[g].kernels) {
      const auto ids = named(op);
      names = names || std::find(ids.begin(), ids.end(), id) != ids.end();
    }
    if (names) destroy_graph(g);
  }
}

}  // namespace truth
