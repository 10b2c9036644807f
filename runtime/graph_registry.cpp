#include "runtime/graph_registry.h"

#include <algorithm>

namespace tierrt {

void GraphRegistry::set(Record& r, CUgraphNode node, const Addresses& blocks, bool known, bool append) {
  Node& n = r.nodes[node];
  if (!append) n.blocks.clear();
  for (CUdeviceptr a : blocks)
    if (std::find(n.blocks.begin(), n.blocks.end(), a) == n.blocks.end()) n.blocks.push_back(a);
  n.known = append ? n.known && known : known;
}

std::shared_ptr<const GraphRegistry::Named> GraphRegistry::flatten(const Record& r) {
  auto named = std::make_shared<Named>();
  std::unordered_set<CUdeviceptr> seen;
  for (const auto& [node, n] : r.nodes) {
    if (!n.known) named->unknown = true;
    for (CUdeviceptr a : n.blocks)
      if (seen.insert(a).second) named->blocks.push_back(a);
  }
  return named;
}

void GraphRegistry::captured(std::uint64_t id, CUgraphNode node, const Addresses& blocks, bool known) {
  std::lock_guard lock(mu_);
  set(captures_[id], node, blocks, known, /*append=*/node == nullptr);
}

void GraphRegistry::captured_free(std::uint64_t id, CUdeviceptr ptr) {
  std::lock_guard lock(mu_);
  captures_[id].frees.push_back(ptr);
  pending_frees_.insert(ptr);
}

void GraphRegistry::capture_ended(std::uint64_t id, CUgraph graph) {
  std::lock_guard lock(mu_);
  auto it = captures_.find(id);
  if (it == captures_.end()) return;
  Record done = std::move(it->second);
  captures_.erase(it);
  if (graph == nullptr) {
    for (CUdeviceptr p : done.frees) pending_frees_.erase(p);
    return;
  }
  // A capture into an existing graph (cuStreamBeginCaptureToGraph) adds to it.
  Record& g = graphs_[graph];
  for (auto& [node, n] : done.nodes) {
    set(g, node, n.blocks, n.known, node == nullptr);
    if (node != nullptr) node_graph_[node] = graph;
  }
  g.frees.insert(g.frees.end(), done.frees.begin(), done.frees.end());
}

void GraphRegistry::node_set(CUgraph graph, CUgraphNode node, const Addresses& blocks, bool known) {
  std::lock_guard lock(mu_);
  set(graphs_[graph], node, blocks, known, false);
  node_graph_[node] = graph;
}

void GraphRegistry::node_set(CUgraphNode node, const Addresses& blocks, bool known) {
  std::lock_guard lock(mu_);
  auto it = node_graph_.find(node);
  if (it != node_graph_.end()) set(graphs_[it->second], node, blocks, known, false);
}

void GraphRegistry::exec_node_set(CUgraphExec exec, CUgraphNode node, const Addresses& blocks, bool known) {
  std::lock_guard lock(mu_);
  auto it = execs_.find(exec);
  if (it == execs_.end()) return;
  set(it->second.record, node, blocks, known, false);
  it->second.named = flatten(it->second.record);
}

void GraphRegistry::instantiated(CUgraph graph, CUgraphExec exec) {
  std::lock_guard lock(mu_);
  auto g = graphs_.find(graph);
  if (g == graphs_.end()) {
    // Built with nothing tierrt saw: it names no block tierrt knows of.
    execs_[exec] = ExecRecord{Record{}, std::make_shared<Named>()};
    return;
  }
  ExecRecord& e = execs_[exec];
  e.record = g->second;
  e.named = flatten(e.record);
}

void GraphRegistry::graph_destroyed(CUgraph graph) {
  std::lock_guard lock(mu_);
  auto g = graphs_.find(graph);
  if (g == graphs_.end()) return;
  for (const auto& [node, n] : g->second.nodes) node_graph_.erase(node);
  graphs_.erase(g);
}

void GraphRegistry::exec_destroyed(CUgraphExec exec) {
  std::lock_guard lock(mu_);
  execs_.erase(exec);
}

std::shared_ptr<const GraphRegistry::Named> GraphRegistry::named(CUgraphExec exec) const noexcept {
  std::lock_guard lock(mu_);
  auto it = execs_.find(exec);
  return it == execs_.end() ? nullptr : it->second.named;
}

GraphRegistry::Addresses GraphRegistry::take_frees(CUgraphExec exec) {
  std::lock_guard lock(mu_);
  Addresses out;
  auto it = execs_.find(exec);
  if (it == execs_.end() || pending_frees_.empty()) return out;
  for (CUdeviceptr p : it->second.record.frees)
    if (pending_frees_.erase(p)) out.push_back(p);
  return out;
}

}  // namespace tierrt
