#include "graph.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "kernel_launch.h"
#include "state.h"

namespace simdev {

namespace {

std::unordered_set<GraphHandle*>& live_graphs() {
  static auto* s = new std::unordered_set<GraphHandle*>;
  return *s;
}

// Where each parameter of `f` sits, from the driver's own parameter query
// (cuKernelGetParamInfo when `f` is a CUkernel).
CUresult parameter_layout(CUfunction f, std::vector<size_t>& offsets, std::vector<size_t>& sizes, size_t& bytes) {
  offsets.clear();
  sizes.clear();
  bytes = 0;
  for (size_t i = 0;; ++i) {
    size_t off = 0, size = 0;
    CUresult r = cuFuncGetParamInfo(f, i, &off, &size);
    if (r == CUDA_ERROR_INVALID_HANDLE) r = cuKernelGetParamInfo(reinterpret_cast<CUkernel>(f), i, &off, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) return CUDA_SUCCESS;  // past the last parameter
    if (r) return r;
    offsets.push_back(off);
    sizes.push_back(size);
    bytes = std::max(bytes, off + size);
  }
}

}  // namespace

std::mutex& graph_mutex() {
  static auto* m = new std::mutex;
  return *m;
}

CUresult KernelLaunch::set(const CUDA_KERNEL_NODE_PARAMS& p) {
  CUfunction f = p.func ? p.func : reinterpret_cast<CUfunction>(p.kern);
  if (!f || (p.kernelParams && p.extra)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<size_t> offs, sizes;
  size_t bytes = 0;
  if (CUresult e = parameter_layout(f, offs, sizes, bytes)) return e;
  std::vector<unsigned char> buf(bytes, 0);
  if (p.kernelParams) {
    for (size_t i = 0; i < offs.size(); ++i) {
      if (!p.kernelParams[i]) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(buf.data() + offs[i], p.kernelParams[i], sizes[i]);
    }
  } else if (p.extra) {
    const void* src = nullptr;
    size_t n = 0;
    for (size_t i = 0; p.extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (p.extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) src = p.extra[i + 1];
      else if (p.extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) n = *static_cast<size_t*>(p.extra[i + 1]);
      else return CUDA_ERROR_INVALID_VALUE;
    }
    if (!src || n < bytes) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(buf.data(), src, bytes);
  } else if (!offs.empty()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  function = f;
  unsigned g[3] = {p.gridDimX, p.gridDimY, p.gridDimZ}, b[3] = {p.blockDimX, p.blockDimY, p.blockDimZ};
  std::memcpy(grid, g, sizeof grid);
  std::memcpy(block, b, sizeof block);
  shared_bytes = p.sharedMemBytes;
  buffer = std::move(buf);
  offsets = std::move(offs);
  point_params();
  return CUDA_SUCCESS;
}

void KernelLaunch::point_params() {
  param_ptrs.clear();
  for (size_t off : offsets) param_ptrs.push_back(buffer.data() + off);
}

CUresult KernelLaunch::launch(const StreamPtr& s) const {
  size_t bytes = buffer.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<unsigned char*>(buffer.data()),
                   CU_LAUNCH_PARAM_BUFFER_SIZE, &bytes, CU_LAUNCH_PARAM_END};
  Work w;
  if (CUresult e = prepare_kernel(function, grid, block, shared_bytes, nullptr, bytes ? extra : nullptr, &w)) return e;
  return submit(s, std::move(w));
}

GraphAllocation::~GraphAllocation() {
  if (freed_by_graph) state().memory.mem_free(ptr);
}

GraphNode* Graph::add(GraphNode node) {
  node.owner = this;
  node.index = nodes.size();
  nodes.push_back(std::make_unique<GraphNode>(std::move(node)));
  return nodes.back().get();
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>();
  for (const auto& n : nodes) {
    GraphNode* c = g->add(*n);
    if (n->kernel) {
      c->kernel = std::make_shared<KernelLaunch>(*n->kernel);
      c->kernel->point_params();
    }
  }
  g->allocations = allocations;
  return g;
}

GraphHandle* new_graph(std::shared_ptr<Graph> g) {
  auto* h = new GraphHandle{std::move(g)};
  std::lock_guard lock(graph_mutex());
  live_graphs().insert(h);
  return h;
}

GraphHandle* find_graph(CUgraph g) {
  auto* h = reinterpret_cast<GraphHandle*>(g);
  return live_graphs().count(h) ? h : nullptr;
}

void destroy_graph(GraphHandle* h) {
  live_graphs().erase(h);
  delete h;
}

GraphNode* find_node(CUgraphNode n) {
  for (GraphHandle* h : live_graphs())
    for (auto& node : h->graph->nodes)
      if (node.get() == reinterpret_cast<GraphNode*>(n)) return node.get();
  return nullptr;
}

GraphNode node_for_work(const Work& w) {
  GraphNode n;
  n.type = w.node_type;
  if (w.kernel) {
    n.type = CU_GRAPH_NODE_TYPE_KERNEL;
    auto k = std::make_shared<KernelLaunch>();
    k->function = w.kernel->function;
    std::memcpy(k->grid, w.kernel->grid, sizeof k->grid);
    std::memcpy(k->block, w.kernel->block, sizeof k->block);
    k->shared_bytes = w.kernel->shared_bytes;
    k->buffer = w.kernel->params;
    std::vector<size_t> sizes;
    size_t bytes = 0;
    // Without a layout the node still launches; only its parameters can't be read back.
    if (parameter_layout(k->function, k->offsets, sizes, bytes) != CUDA_SUCCESS) k->offsets.clear();
    k->point_params();
    n.kernel = std::move(k);
  } else {
    n.work = w;
    n.work.deps.clear();
  }
  return n;
}

}  // namespace simdev
