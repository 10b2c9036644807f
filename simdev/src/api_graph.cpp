// CUDA graphs, as far as stream capture needs them: a captured graph can be
// instantiated and launched (its work replays in capture order) and destroyed.
#include <mutex>
#include <unordered_set>

#include "state.h"
#include "stream.h"

using namespace simdev;

namespace {

struct GraphExec {
  std::shared_ptr<Graph> graph;
};

struct Handles {
  std::mutex mu;
  std::unordered_set<const void*> graphs, execs;
};

Handles& handles() {
  static Handles* h = new Handles;
  return *h;
}

bool live(std::unordered_set<const void*> Handles::*set, const void* p) {
  std::lock_guard lock(handles().mu);
  return (handles().*set).count(p) != 0;
}

CUresult graph_launch(Context* ctx, CUgraphExec exec, CUstream h, bool ptsz) {
  if (!live(&Handles::execs, exec)) return CUDA_ERROR_INVALID_HANDLE;
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  for (const Work& w : reinterpret_cast<GraphExec*>(exec)->graph->work)
    if (CUresult e = submit(s, w)) return e;
  return CUDA_SUCCESS;
}

}  // namespace

namespace simdev {
GraphHandle* new_graph(std::shared_ptr<Graph> g) {
  auto* h = new GraphHandle{std::move(g)};
  std::lock_guard lock(handles().mu);
  handles().graphs.insert(h);
  return h;
}
}  // namespace simdev

SIMDEV_API CUresult CUDAAPI cuGraphCreate(CUgraph* graph, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuGraphCreate", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  (void)ctx;
  if (!graph || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *graph = reinterpret_cast<CUgraph>(new_graph(std::make_shared<Graph>()));
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphDestroy(CUgraph graph) {
  SIMDEV_ENTER("cuGraphDestroy", CUDA_ERROR_INVALID_VALUE);
  {
    std::lock_guard lock(handles().mu);
    if (!handles().graphs.erase(graph)) return CUDA_ERROR_INVALID_VALUE;
  }
  delete reinterpret_cast<GraphHandle*>(graph);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  SIMDEV_ENTER_CTX("cuGraphInstantiateWithFlags", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  (void)ctx;
  (void)flags;
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  if (!live(&Handles::graphs, graph)) return CUDA_ERROR_INVALID_VALUE;
  // An executable graph is a snapshot: later edits to the graph don't show.
  auto* e = new GraphExec{std::make_shared<Graph>(*reinterpret_cast<GraphHandle*>(graph)->graph)};
  std::lock_guard lock(handles().mu);
  handles().execs.insert(e);
  *exec = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  SIMDEV_ENTER("cuGraphExecDestroy", CUDA_ERROR_INVALID_VALUE);
  {
    std::lock_guard lock(handles().mu);
    if (!handles().execs.erase(exec)) return CUDA_ERROR_INVALID_VALUE;
  }
  delete reinterpret_cast<GraphExec*>(exec);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream h) {
  SIMDEV_ENTER_CTX("cuGraphLaunch", CUDA_ERROR_INVALID_VALUE, ctx);
  return graph_launch(ctx, exec, h, false);
}
SIMDEV_API CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec exec, CUstream h) {
  SIMDEV_ENTER_CTX("cuGraphLaunch", CUDA_ERROR_INVALID_VALUE, ctx);
  return graph_launch(ctx, exec, h, true);
}
