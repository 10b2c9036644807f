// CUDA graphs: built by stream capture or node by node, instantiated into
// executable snapshots whose kernel parameters can be changed or updated
// from an edited graph, and launched: the nodes run in an order that honours
// every dependency (the order they were added in) on the launch stream.
#include <unordered_set>

#include "copy_work.h"
#include "graph.h"
#include "state.h"

using namespace simdev;

namespace {

struct GraphExec {
  std::shared_ptr<Graph> graph;
  const Graph* source = nullptr;  // whose node handles name this snapshot's nodes
};

// Guarded by graph_mutex().
std::unordered_set<GraphExec*>& live_execs() {
  static auto* s = new std::unordered_set<GraphExec*>;
  return *s;
}

GraphExec* find_exec(CUgraphExec e) {
  auto* x = reinterpret_cast<GraphExec*>(e);
  return live_execs().count(x) ? x : nullptr;
}

// Adds `node` after `deps` (all nodes of `graph`).
CUresult add_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t ndeps, GraphNode node) {
  if (!out || (ndeps && !deps)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(graph_mutex());
  GraphHandle* g = find_graph(graph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < ndeps; ++i) {
    GraphNode* d = find_node(deps[i]);
    if (!d || d->owner != g->graph.get()) return CUDA_ERROR_INVALID_VALUE;
    node.deps.push_back(d->index);
  }
  *out = reinterpret_cast<CUgraphNode>(g->graph->add(std::move(node)));
  return CUDA_SUCCESS;
}

CUresult graph_launch(Context* ctx, CUgraphExec exec, CUstream h, bool ptsz) {
  StreamPtr s;
  if (CUresult e = resolve_stream(h, ptsz, ctx, &s)) return e;
  std::shared_ptr<Graph> g;
  {
    std::lock_guard lock(graph_mutex());
    GraphExec* x = find_exec(exec);
    if (!x) return CUDA_ERROR_INVALID_HANDLE;
    g = x->graph;  // a concurrent update replaces the snapshot; this launch keeps its own
  }
  for (const auto& n : g->nodes) {
    if (n->kernel) {
      if (CUresult e = n->kernel->launch(s)) return e;
    } else if (n->work.run) {
      if (CUresult e = submit(s, n->work)) return e;
    }
  }
  return CUDA_SUCCESS;
}

void fill_kernel_params(const KernelLaunch& k, CUDA_KERNEL_NODE_PARAMS* p) {
  *p = CUDA_KERNEL_NODE_PARAMS{};
  p->func = k.function;
  p->gridDimX = k.grid[0], p->gridDimY = k.grid[1], p->gridDimZ = k.grid[2];
  p->blockDimX = k.block[0], p->blockDimY = k.block[1], p->blockDimZ = k.block[2];
  p->sharedMemBytes = k.shared_bytes;
  p->kernelParams = const_cast<void**>(k.param_ptrs.data());
}

// Graphs match in shape when their nodes and dependencies are the same.
bool same_topology(const Graph& a, const Graph& b) {
  if (a.nodes.size() != b.nodes.size()) return false;
  for (size_t i = 0; i < a.nodes.size(); ++i)
    if (a.nodes[i]->type != b.nodes[i]->type || a.nodes[i]->deps != b.nodes[i]->deps) return false;
  return true;
}

}  // namespace

SIMDEV_API CUresult CUDAAPI cuGraphCreate(CUgraph* graph, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuGraphCreate", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  (void)ctx;
  if (!graph || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *graph = reinterpret_cast<CUgraph>(new_graph(std::make_shared<Graph>()));
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphDestroy(CUgraph graph) {
  SIMDEV_ENTER("cuGraphDestroy", CUDA_ERROR_INVALID_VALUE);
  std::lock_guard lock(graph_mutex());
  GraphHandle* g = find_graph(graph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  destroy_graph(g);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                size_t ndeps) {
  SIMDEV_ENTER("cuGraphAddEmptyNode", CUDA_ERROR_OUT_OF_MEMORY);
  return add_node(node, graph, deps, ndeps, GraphNode{});
}

SIMDEV_API CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                    size_t ndeps, const CUDA_KERNEL_NODE_PARAMS* params) {
  SIMDEV_ENTER_CTX("cuGraphAddKernelNode_v2", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  (void)ctx;
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  GraphNode n;
  n.type = CU_GRAPH_NODE_TYPE_KERNEL;
  n.kernel = std::make_shared<KernelLaunch>();
  if (CUresult e = n.kernel->set(*params)) return e;
  return add_node(node, graph, deps, ndeps, std::move(n));
}

SIMDEV_API CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                 size_t ndeps, const CUDA_MEMCPY3D* copy, CUcontext c) {
  SIMDEV_ENTER_CTX("cuGraphAddMemcpyNode", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  (void)ctx;
  if (!copy || (c && !valid_context(c))) return CUDA_ERROR_INVALID_VALUE;
  GraphNode n;
  n.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  if (CUresult e = memcpy3d_work(*copy, &n.work)) return e;
  return add_node(node, graph, deps, ndeps, std::move(n));
}

SIMDEV_API CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                                 size_t ndeps, const CUDA_MEMSET_NODE_PARAMS* p, CUcontext c) {
  SIMDEV_ENTER_CTX("cuGraphAddMemsetNode", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  (void)ctx;
  if (!p || (c && !valid_context(c))) return CUDA_ERROR_INVALID_VALUE;
  unsigned elem = p->elementSize;
  if ((elem != 1 && elem != 2 && elem != 4) || p->width == 0 || p->height == 0 || !p->dst || p->dst % elem)
    return CUDA_ERROR_INVALID_VALUE;
  if (p->height > 1 && p->pitch < p->width * elem) return CUDA_ERROR_INVALID_VALUE;
  GraphNode n;
  n.type = CU_GRAPH_NODE_TYPE_MEMSET;
  n.work = memset_work(p->dst, p->height > 1 ? p->pitch : p->width * elem, p->value, elem, p->width, p->height);
  return add_node(node, graph, deps, ndeps, std::move(n));
}

SIMDEV_API CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  SIMDEV_ENTER("cuGraphNodeGetType", CUDA_ERROR_INVALID_VALUE);
  if (!type) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(graph_mutex());
  GraphNode* n = find_node(node);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *type = n->type;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  SIMDEV_ENTER("cuGraphGetNodes", CUDA_ERROR_INVALID_VALUE);
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(graph_mutex());
  GraphHandle* g = find_graph(graph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  size_t total = g->graph->nodes.size();
  if (nodes) {
    for (size_t i = 0; i < std::min(*count, total); ++i) nodes[i] = reinterpret_cast<CUgraphNode>(g->graph->nodes[i].get());
    for (size_t i = total; i < *count; ++i) nodes[i] = nullptr;
  }
  *count = total;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* params) {
  SIMDEV_ENTER("cuGraphKernelNodeGetParams_v2", CUDA_ERROR_INVALID_VALUE);
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(graph_mutex());
  GraphNode* n = find_node(node);
  if (!n || !n->kernel) return CUDA_ERROR_INVALID_VALUE;
  fill_kernel_params(*n->kernel, params);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) {
  SIMDEV_ENTER_CTX("cuGraphKernelNodeSetParams_v2", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)ctx;
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  auto k = std::make_shared<KernelLaunch>();
  if (CUresult e = k->set(*params)) return e;  // reads the caller's values now, as the driver does
  std::lock_guard lock(graph_mutex());
  GraphNode* n = find_node(node);
  if (!n || !n->kernel) return CUDA_ERROR_INVALID_VALUE;
  n->kernel = std::move(k);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  SIMDEV_ENTER_CTX("cuGraphInstantiateWithFlags", CUDA_ERROR_OUT_OF_MEMORY, ctx);
  (void)ctx;
  (void)flags;
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(graph_mutex());
  GraphHandle* g = find_graph(graph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  // An executable graph is a snapshot: later edits to the graph don't show.
  auto* x = new GraphExec{std::shared_ptr<Graph>(g->graph->clone()), g->graph.get()};
  live_execs().insert(x);
  *exec = reinterpret_cast<CUgraphExec>(x);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                              const CUDA_KERNEL_NODE_PARAMS* params) {
  SIMDEV_ENTER_CTX("cuGraphExecKernelNodeSetParams_v2", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)ctx;
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  auto k = std::make_shared<KernelLaunch>();
  if (CUresult e = k->set(*params)) return e;
  std::lock_guard lock(graph_mutex());
  GraphExec* x = find_exec(exec);
  GraphNode* n = find_node(node);
  if (!x || !n || n->owner != x->source || !n->kernel) return CUDA_ERROR_INVALID_VALUE;
  // Launches already made keep the snapshot they were made with.
  auto next = std::shared_ptr<Graph>(x->graph->clone());
  next->nodes[n->index]->kernel = std::move(k);
  x->graph = std::move(next);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  SIMDEV_ENTER_CTX("cuGraphExecUpdate_v2", CUDA_ERROR_INVALID_VALUE, ctx);
  (void)ctx;
  if (!info) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(graph_mutex());
  GraphExec* x = find_exec(exec);
  GraphHandle* g = find_graph(graph);
  if (!x || !g) return CUDA_ERROR_INVALID_VALUE;
  *info = CUgraphExecUpdateResultInfo{};
  if (!same_topology(*x->graph, *g->graph)) {
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  // Node handles of the updating graph now name this snapshot's nodes.
  x->graph = std::shared_ptr<Graph>(g->graph->clone());
  x->source = g->graph.get();
  info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  SIMDEV_ENTER("cuGraphExecDestroy", CUDA_ERROR_INVALID_VALUE);
  std::lock_guard lock(graph_mutex());
  GraphExec* x = find_exec(exec);
  if (!x) return CUDA_ERROR_INVALID_VALUE;
  live_execs().erase(x);
  delete x;
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
