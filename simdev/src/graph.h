// CUDA graphs: nodes with dependencies, built by stream capture or node by
// node (cuGraphAdd*Node). Nodes are only ever added after the nodes they
// depend on, so a graph's node order is a valid execution order; a launch
// runs the nodes in that order on the launch stream.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "stream.h"

namespace simdev {

// Guards every graph, node and capture sequence (graph.cpp).
std::mutex& graph_mutex();

// A kernel node's launch: the packed parameter buffer and where each
// parameter sits in it, so that cuGraphKernelNodeGetParams can hand back
// pointers to the values.
struct KernelLaunch {
  CUfunction function = nullptr;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, shared_bytes = 0;
  std::vector<unsigned char> buffer;
  std::vector<size_t> offsets;
  std::vector<void*> param_ptrs;  // into buffer

  // Takes the layout from the driver's own parameter query.
  CUresult set(const CUDA_KERNEL_NODE_PARAMS& p);
  void point_params();
  // Enqueues the kernel on `s` as cuLaunchKernel would, without its entry
  // point: a graph launch is one driver call.
  CUresult launch(const StreamPtr& s) const;
};

// Device memory of a cuMemAllocAsync captured into a graph. It exists from
// the capture on (so the graph's nodes may name it); when the graph frees it
// too, it goes back when the last graph or executable graph holding it goes.
struct GraphAllocation {
  uint64_t ptr = 0;
  bool freed_by_graph = false;
  ~GraphAllocation();
};

struct Graph;

struct GraphNode {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  const Graph* owner = nullptr;
  size_t index = 0;
  std::vector<size_t> deps;  // indices of earlier nodes
  std::shared_ptr<KernelLaunch> kernel;  // kernel nodes
  Work work;                             // any other node: what it runs
  uint64_t alloc_ptr = 0;                // memory alloc / free nodes
};

struct Graph {
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  std::vector<std::unique_ptr<GraphNode>> nodes;
  std::vector<std::shared_ptr<GraphAllocation>> allocations;

  GraphNode* add(GraphNode node);
  // A deep copy (nodes and kernel parameters; allocations shared).
  std::unique_ptr<Graph> clone() const;
  // True when `n` is one of this graph's nodes.
  bool owns(const GraphNode* n) const { return n && n->owner == this && n->index < nodes.size() && nodes[n->index].get() == n; }
};

// What a CUgraph handle points at.
struct GraphHandle {
  std::shared_ptr<Graph> graph;
};
GraphHandle* new_graph(std::shared_ptr<Graph> g);
GraphHandle* find_graph(CUgraph g);  // null when not a live graph; caller holds graph_mutex()
void destroy_graph(GraphHandle* h);
// The node a CUgraphNode handle names in a live graph; caller holds graph_mutex().
GraphNode* find_node(CUgraphNode n);

// A node for work submitted to a capturing stream.
GraphNode node_for_work(const Work& w);

}  // namespace simdev
