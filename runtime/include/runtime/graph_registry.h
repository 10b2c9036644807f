// The blocks each CUDA graph names, so that a launch of one of its executable
// graphs can make them resident and record their use, and they may move
// between launches.
//
// A graph learns its blocks node by node: from captured launches, copies and
// memsets (while the capture is open, under its capture id), and from nodes
// added or changed through the graph API. An executable graph takes its
// graph's blocks when instantiated or updated, and its own node changes
// after that. Blocks are kept as the base addresses of tierrt's blocks and
// the addresses of the small-allocation slots named (looked up again at each
// launch as parameter words are: a block freed since is skipped, a slot
// names its slab, and pointer tables are read as they are then).
//
// A node whose blocks tierrt could not read (a kernel whose parameter layout
// the driver would not give) makes its graph "unknown": the blocks it does
// name then stay resident for good after each launch, as for any graph
// before tierrt knew graphs.
//
// A tierrt block freed by a captured cuMemFreeAsync is freed when a graph of
// that capture is first launched (after its work, on the launch stream):
// until then its memory is the graph's, and no allocation is given it.
//
// Not on the launch path except for named() (one lock, no allocation).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "allocator/ranked_mutex.h"
#include "runtime/lock_rank.h"

namespace tierrt {

class GraphRegistry {
 public:
  using Addresses = std::vector<CUdeviceptr>;
  // What a launch of an executable graph names.
  struct Named {
    Addresses blocks;      // distinct block base addresses
    bool unknown = false;  // some node's blocks could not be read
  };

  // Work captured into capture `id`; `node` is the node it became (null
  // when the driver would not say).
  void captured(std::uint64_t id, CUgraphNode node, const Addresses& blocks, bool known);
  // A captured cuMemFreeAsync of block `ptr`.
  void captured_free(std::uint64_t id, CUdeviceptr ptr);
  // Capture `id` ended: what it captured belongs to `graph` (null: the
  // capture failed and nothing of it remains).
  void capture_ended(std::uint64_t id, CUgraph graph);

  // A node added to `graph`, or an existing node's new parameters.
  void node_set(CUgraph graph, CUgraphNode node, const Addresses& blocks, bool known);
  void node_set(CUgraphNode node, const Addresses& blocks, bool known);
  void exec_node_set(CUgraphExec exec, CUgraphNode node, const Addresses& blocks, bool known);

  // cuGraphInstantiate*, and cuGraphExecUpdate: `exec` now runs `graph`.
  void instantiated(CUgraph graph, CUgraphExec exec);
  void graph_destroyed(CUgraph graph);
  void exec_destroyed(CUgraphExec exec);

  // What a launch of `exec` names; null for an executable graph tierrt never
  // saw built. Takes one lock; never allocates.
  std::shared_ptr<const Named> named(CUgraphExec exec) const noexcept;
  // The frees `exec` carries out that have not happened yet; each is handed
  // out once, whichever executable graph of the capture is launched first.
  Addresses take_frees(CUgraphExec exec);

 private:
  struct Node {
    Addresses blocks;
    bool known = true;
  };
  struct Record {
    std::unordered_map<CUgraphNode, Node> nodes;  // null key: work whose node is not known
    Addresses frees;
  };
  struct ExecRecord {
    Record record;
    std::shared_ptr<const Named> named;
  };
  static void set(Record& r, CUgraphNode node, const Addresses& blocks, bool known, bool append);
  static std::shared_ptr<const Named> flatten(const Record& r);

  mutable RankedMutex mu_{kRankGraphs, "runtime.graphs"};  // a leaf: no other lock or driver call inside
  std::unordered_map<std::uint64_t, Record> captures_;
  std::unordered_map<CUgraph, Record> graphs_;
  std::unordered_map<CUgraphExec, ExecRecord> execs_;
  std::unordered_map<CUgraphNode, CUgraph> node_graph_;
  std::unordered_set<CUdeviceptr> pending_frees_;
};

}  // namespace tierrt
