// The runtime's locks in the one order of docs/design.md ("Lock order"):
// below the allocator's ranks (10-90, allocator/lock_rank.h) the ones that
// hold the allocator's locks inside them; above, the leaves, inside which
// nothing is taken. Checked in builds with assertions
// (allocator/ranked_mutex.h).
#pragma once

namespace tierrt {

enum RuntimeLockRank : unsigned {
  kRankStart = 1,          // runtime.start: the engine's creation, once per process
  kRankOutputs = 2,        // runtime.outputs: one writer of the outputs at a time
  kRankPointerTables = 100,
  kRankRunMonitor = 110,
  kRankGraphs = 120,
  kRankIpc = 125,          // runtime.ipc: exported and opened allocations; the allocation records inside it
  kRankAllocations = 130,
  kRankNccl = 140,
  kRankLearnedStep = 160,
  kRankMoveFeedback = 170,
  kRankNodeLedger = 200,   // the node's process-shared ledger (a robust pthread mutex)
};

}  // namespace tierrt
