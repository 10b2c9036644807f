#include "capture.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <set>

#include "state.h"

namespace simdev {

namespace {

// Open sequences (guarded by graph_mutex()).
std::vector<std::shared_ptr<CaptureSequence>>& open_sequences() {
  static auto* v = new std::vector<std::shared_ptr<CaptureSequence>>;
  return *v;
}

thread_local CUstreamCaptureMode tl_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

std::atomic<unsigned long long> g_next_capture_id{1};

// Caller holds graph_mutex(). SIMDEV_REPORT_FAULTS=1 says what ended a
// capture, the way a failed graph capture is hard to trace otherwise.
void invalidate(CaptureSequence& seq, const char* why) {
  if (!seq.invalidated && state().config.report_faults)
    std::fprintf(stderr, "simdev: capture %llu invalidated: %s\n", seq.id, why);
  seq.invalidated = true;
}

// Caller holds graph_mutex(). Detaches every stream from `seq`.
void close_sequence(const std::shared_ptr<CaptureSequence>& seq) {
  for (auto& m : seq->members) m->capture = StreamCapture{};
  seq->members.clear();
  seq->origin.reset();
  auto& open = open_sequences();
  open.erase(std::remove(open.begin(), open.end(), seq), open.end());
}

// Caller holds graph_mutex(). Every node the frontier depends on, itself included.
std::set<size_t> ancestors(const Graph& g, const std::vector<size_t>& frontier) {
  std::set<size_t> seen;
  std::vector<size_t> todo = frontier;
  while (!todo.empty()) {
    size_t i = todo.back();
    todo.pop_back();
    if (!seen.insert(i).second) continue;
    for (size_t d : g.nodes[i]->deps) todo.push_back(d);
  }
  return seen;
}

// Caller holds graph_mutex(). Appends a node after the stream's frontier.
GraphNode* append(const StreamPtr& s, GraphNode node) {
  node.deps = s->capture.frontier;
  GraphNode* n = s->capture.sequence->graph->graph->add(std::move(node));
  s->capture.frontier = {n->index};
  return n;
}

bool blocking_stream_captures(Context* ctx, std::vector<std::shared_ptr<CaptureSequence>>* seqs) {
  bool any = false;
  for (auto& seq : open_sequences()) {
    if (seq->invalidated) continue;
    for (auto& m : seq->members)
      if (m->context() == ctx && m->blocking()) {
        any = true;
        if (seqs) seqs->push_back(seq);
        break;
      }
  }
  return any;
}

}  // namespace

CUresult capture_begin(const StreamPtr& s, CUstreamCaptureMode mode, CUgraph into, const CUgraphNode* deps,
                       size_t ndeps) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  if (s->kind() == StreamKind::kLegacyDefault) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (ndeps && !deps) return CUDA_ERROR_INVALID_VALUE;
  GraphHandle* fresh = into ? nullptr : new_graph(std::make_shared<Graph>());
  std::lock_guard lock(graph_mutex());
  auto fail = [&](CUresult e) {
    if (fresh) destroy_graph(fresh);
    return e;
  };
  if (s->capture.sequence) return fail(CUDA_ERROR_ILLEGAL_STATE);
  GraphHandle* g = fresh;
  std::vector<size_t> frontier;
  if (into) {
    g = find_graph(into);
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ndeps; ++i) {
      auto* n = reinterpret_cast<GraphNode*>(deps[i]);
      bool mine = false;
      for (auto& node : g->graph->nodes) mine = mine || node.get() == n;
      if (!mine) return CUDA_ERROR_INVALID_VALUE;
      frontier.push_back(n->index);
    }
  } else if (ndeps) {
    return fail(CUDA_ERROR_INVALID_VALUE);
  }
  auto seq = std::make_shared<CaptureSequence>();
  seq->id = g_next_capture_id++;
  seq->mode = mode;
  seq->thread = std::this_thread::get_id();
  seq->graph = g;
  seq->user_graph = into != nullptr;
  seq->origin = s;
  seq->members = {s};
  s->capture.sequence = seq;
  s->capture.frontier = std::move(frontier);
  open_sequences().push_back(seq);
  return CUDA_SUCCESS;
}

CUresult capture_end(const StreamPtr& s, CUgraph* out) {
  std::lock_guard lock(graph_mutex());
  std::shared_ptr<CaptureSequence> seq = s->capture.sequence;
  if (!seq) return CUDA_ERROR_ILLEGAL_STATE;
  // Only the origin stream ends a capture; a joined stream has no capture of its own to end.
  if (seq->origin != s) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  if (seq->mode != CU_STREAM_CAPTURE_MODE_RELAXED && seq->thread != std::this_thread::get_id())
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  CUresult result = seq->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
  if (!result) {
    // Every joined stream's work must lead back into the origin stream.
    std::set<size_t> joined = ancestors(*seq->graph->graph, s->capture.frontier);
    for (auto& m : seq->members)
      for (size_t n : m->capture.frontier)
        if (!joined.count(n)) result = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  }
  close_sequence(seq);
  if (result) {
    if (!seq->user_graph) {
      // No graph will ever run: its allocations go back with it.
      for (auto& a : seq->graph->graph->allocations) a->freed_by_graph = true;
      destroy_graph(seq->graph);
    }
    *out = nullptr;
    return result;
  }
  *out = reinterpret_cast<CUgraph>(seq->graph);
  return CUDA_SUCCESS;
}

bool capture_work(const StreamPtr& s, const Work& w, CUresult* result) {
  {
    std::lock_guard lock(graph_mutex());
    if (!s->capture.sequence) return false;
  }
  GraphNode node = node_for_work(w);  // queries the kernel's layout: outside the lock
  std::lock_guard lock(graph_mutex());
  if (!s->capture.sequence) return false;
  if (s->capture.sequence->invalidated) {
    *result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return true;
  }
  append(s, std::move(node));
  *result = CUDA_SUCCESS;
  return true;
}

bool capture_alloc(const StreamPtr& s, uint64_t ptr, CUresult* result) {
  std::lock_guard lock(graph_mutex());
  if (!s->capture.sequence) return false;
  if (s->capture.sequence->invalidated) {
    *result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return true;
  }
  GraphNode node;
  node.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  node.alloc_ptr = ptr;
  append(s, std::move(node));
  auto a = std::make_shared<GraphAllocation>();
  a->ptr = ptr;
  s->capture.sequence->graph->graph->allocations.push_back(std::move(a));
  *result = CUDA_SUCCESS;
  return true;
}

bool capture_free(const StreamPtr& s, uint64_t ptr, CUresult* result) {
  std::lock_guard lock(graph_mutex());
  if (!s->capture.sequence) return false;
  auto& seq = s->capture.sequence;
  if (seq->invalidated) {
    *result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return true;
  }
  // A captured free becomes a free node, which only frees this graph's own
  // allocations; anything else cannot be captured.
  auto& allocs = seq->graph->graph->allocations;
  auto it = std::find_if(allocs.begin(), allocs.end(),
                         [&](const auto& a) { return a->ptr == ptr && !a->freed_by_graph; });
  if (it == allocs.end()) {
    invalidate(*seq, "a captured free of memory the capture did not allocate");
    *result = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  (*it)->freed_by_graph = true;
  GraphNode node;
  node.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  node.alloc_ptr = ptr;
  append(s, std::move(node));
  *result = CUDA_SUCCESS;
  return true;
}

bool capture_record_event(const StreamPtr& s, EventMark& mark, CUresult* result) {
  std::lock_guard lock(graph_mutex());
  if (!s->capture.sequence) return false;
  if (s->capture.sequence->invalidated) {
    *result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return true;
  }
  mark.capture = s->capture.sequence;
  mark.nodes = s->capture.frontier;
  *result = CUDA_SUCCESS;
  return true;
}

bool capture_wait_event(const StreamPtr& s, const EventMark* mark, CUresult* result) {
  std::lock_guard lock(graph_mutex());
  auto& mine = s->capture.sequence;
  if (mine && mine->invalidated) {
    *result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return true;
  }
  std::shared_ptr<CaptureSequence> theirs = mark ? mark->capture : nullptr;
  bool theirs_open = theirs && theirs->origin;
  if (!theirs) {
    if (!mine) return false;  // an ordinary wait
    if (!mark || !mark->seq) {
      *result = CUDA_SUCCESS;  // never recorded: nothing to wait for
      return true;
    }
    // Work outside the capture cannot be a dependency of the graph.
    invalidate(*mine, "a capturing stream waited on an event recorded outside the capture");
    *result = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    return true;
  }
  if (!theirs_open) {
    if (mine) invalidate(*mine, "a wait on an event recorded in a capture that has ended");
    *result = CUDA_ERROR_CAPTURED_EVENT;
    return true;
  }
  if (mine && mine != theirs) {
    invalidate(*mine, "a wait on an event of another capture");
    invalidate(*theirs, "another capture waited on one of its events");
    *result = CUDA_ERROR_STREAM_CAPTURE_MERGE;
    return true;
  }
  if (theirs->invalidated) {
    *result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return true;
  }
  if (!mine) {
    if (s->kind() == StreamKind::kLegacyDefault) {
      invalidate(*theirs, "the legacy default stream waited on one of its events");
      *result = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      return true;
    }
    // Fork: the waiting stream joins the capture.
    s->capture.sequence = theirs;
    s->capture.frontier = mark->nodes;
    theirs->members.push_back(s);
  } else {
    auto& f = s->capture.frontier;
    for (size_t n : mark->nodes)
      if (std::find(f.begin(), f.end(), n) == f.end()) f.push_back(n);
  }
  *result = CUDA_SUCCESS;
  return true;
}

bool refuse_captured_event(const EventMark* mark) {
  if (!mark) return false;
  std::lock_guard lock(graph_mutex());
  if (!mark->capture) return false;
  invalidate(*mark->capture, "one of its events was queried or waited for on the host");
  return true;
}

CUresult refuse_legacy_during_capture(Context* ctx) {
  std::lock_guard lock(graph_mutex());
  std::vector<std::shared_ptr<CaptureSequence>> seqs;
  if (!blocking_stream_captures(ctx, &seqs)) return CUDA_SUCCESS;
  for (auto& seq : seqs) invalidate(*seq, "work on the legacy default stream while a blocking stream captured");
  return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
}

CUresult refuse_if_capturing(const StreamPtr& s) {
  std::lock_guard lock(graph_mutex());
  auto& seq = s->capture.sequence;
  if (!seq) return CUDA_SUCCESS;
  if (seq->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  invalidate(*seq, "a call a capturing stream does not allow (a synchronize or query of the stream)");
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult refuse_context_sync_during_capture(Context* ctx) {
  if (CUresult e = refuse_unsafe_call()) return e;
  std::lock_guard lock(graph_mutex());
  bool any = false;
  for (auto& seq : open_sequences()) {
    if (seq->invalidated) continue;
    for (auto& m : seq->members)
      if (m->context() == ctx) {
        invalidate(*seq, "a context synchronize during the capture");
        any = true;
        break;
      }
  }
  return any ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult refuse_unsafe_call() {
  if (tl_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  std::lock_guard lock(graph_mutex());
  bool refused = false;
  auto me = std::this_thread::get_id();
  for (auto& seq : open_sequences()) {
    if (seq->invalidated) continue;
    bool own = seq->thread == me && seq->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    bool others = seq->thread != me && seq->mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                  tl_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (own || others) {
      invalidate(*seq, own ? "an unsafe call on the capturing thread" : "an unsafe call on another thread during a global capture");
      refused = true;
    }
  }
  return refused ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUstreamCaptureMode exchange_thread_capture_mode(CUstreamCaptureMode mode) {
  std::swap(tl_mode, mode);
  return mode;
}

CUresult capture_info(const StreamPtr& s, CaptureInfo* out) {
  std::lock_guard lock(graph_mutex());
  *out = CaptureInfo{};
  if (s->kind() == StreamKind::kLegacyDefault && blocking_stream_captures(s->context(), nullptr))
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  auto& seq = s->capture.sequence;
  if (!seq) return CUDA_SUCCESS;
  out->status = seq->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  out->id = seq->id;
  out->graph = reinterpret_cast<CUgraph>(seq->graph);
  auto& rep = s->capture.reported;
  rep.clear();
  for (size_t i : s->capture.frontier) rep.push_back(reinterpret_cast<CUgraphNode>(seq->graph->graph->nodes[i].get()));
  out->deps = rep.data();
  out->ndeps = rep.size();
  return CUDA_SUCCESS;
}

}  // namespace simdev
