// One thread of the random program: its own blocks (a host mirror of every
// byte each one must hold), its per-thread default stream and two
// non-blocking streams, and the operations it draws from its seed.
//
// Every cross-stream dependency is an event (or a synchronize when an event
// call fails), as on a GPU: before an operation on stream S touches a block,
// S waits for the last stream that touched it. Blocks are never shared
// between threads, so threads meet only inside the driver (and tierrt).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "allowed_errors.h"
#include "driver_table.h"
#include "kernels.h"

namespace truth {

struct Options {
  uint64_t seed = 20261130;
  uint64_t ops = 10000;            // over all threads
  unsigned threads = 4;
  bool faults = false;             // arm a fault every fault_every operations
  unsigned fault_every = 16;
  bool graphs = true;              // stream capture + cuGraphLaunch
  bool tables = true;              // kernels that reach blocks through pointer tables
  uint64_t cap_bytes = 128u << 20; // live bytes over all threads
};

struct Tally {
  std::map<std::string, uint64_t> ops;     // by kind
  std::map<std::string, uint64_t> errors;  // "call: CUDA_ERROR_..."
  uint64_t faults_armed = 0;
  // Failed calls a fault can explain: each armed fault fails one call. (A
  // capture that an earlier failure invalidated is not counted again.)
  uint64_t failed_calls = 0;
  uint64_t bytes_checked = 0;
  uint64_t bytes_unknown = 0;  // left unchecked: a failed call may have written them
  uint64_t wrong_bytes = 0;
  void merge(const Tally& o);
};

class Worker {
 public:
  // Creates the worker's streams and events (from the main thread: both are
  // context objects; only the NULL stream means a different stream per thread).
  Worker(const Driver& d, const Kernels& k, const Options& o, unsigned index,
         const std::atomic<bool>& faults_possible);
  // Runs in the worker's own thread: makes the context current there.
  void enter(CUcontext ctx);
  void run_ops(uint64_t count);
  // After every fault is cleared: reads back every block, frees everything.
  void check_and_release();
  const Tally& tally() const { return tally_; }

 private:
  static constexpr int kStreams = 3;  // 0: the per-thread default stream
  struct Range {
    size_t off, n;  // in words
  };
  struct TableSlot {
    int block;
    Range range;
  };
  struct Block {
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    bool from_async = false;
    int last_stream = -1;  // the stream whose work on it is last, or -1: idle
    bool unknown = true;   // contents not predictable (never written, or a failed write)
    bool is_table = false;
    bool table_valid = false;  // every slot names a live block
    std::vector<TableSlot> slots;
    std::vector<uint32_t> mirror;
    std::vector<std::string> history;  // the last few operations, for a failure report
    size_t words() const { return bytes / 4; }
  };
  enum class KernelKind { kFill, kAdd, kMix, kTable };
  struct KernelOp {
    KernelKind kind;
    int dst;  // the table for kTable
    int src;
    Range dst_range, src_range;
    uint32_t arg;
  };
  struct Graph {
    CUgraph graph;
    CUgraphExec exec;
    std::vector<KernelOp> kernels;
  };

  // Infrastructure (worker.cpp).
  CUstream handle(int s);
  bool check(CUresult r, Call c);
  [[noreturn]] void fatal(const std::string& why);
  void order_after(int stream, int last);
  void order_for(int stream, const std::vector<int>& ids);
  void used_on(int stream, const std::vector<int>& ids);
  void synchronize(int s);
  void stream_done(int s);
  void note(int id, const std::string& what);
  void describe(int id, const char* what);
  void read_and_compare(int id, Range r, int stream, bool async);
  void arm_fault();
  uint64_t rand(uint64_t n) { return rng_() % n; }
  bool coin(unsigned one_in = 2) { return rng_() % one_in == 0; }
  int pick_block(bool tables);
  int pick_stream() { return static_cast<int>(rand(kStreams)); }
  Range pick_range(const Block& b, bool full);

  // Operations (worker_ops.cpp).
  void step(uint64_t index);
  void op_alloc(bool table);
  void op_free();
  void op_htod();
  void op_memset();
  void op_dtod();
  void op_kernel();
  void op_table_write();
  void op_table_kernel();
  void op_capture();
  void op_graph_launch();
  void op_verify();
  void op_stream_sync();
  void op_event_sync();
  void write_whole(int id);
  void write_table(int t);
  bool random_kernel(KernelOp* op);
  CUresult launch(const KernelOp& op, int stream);
  std::vector<int> named(const KernelOp& op) const;
  void apply(const KernelOp& op);
  void mark_unknown(const KernelOp& op);
  void launch_graph(size_t g);
  void destroy_graph(size_t g);
  void forget(int id);
  void destroy_graphs_naming(int id);

  const Driver& d_;
  const Kernels& k_;
  const Options& o_;
  const unsigned index_;
  const std::atomic<bool>& faults_possible_;
  std::mt19937_64 rng_;
  CUstream streams_[kStreams] = {};
  CUevent events_[kStreams] = {};
  std::vector<std::vector<uint32_t>> pending_host_[kStreams];  // sources of async copies in flight
  std::map<int, Block> blocks_;
  std::vector<Graph> graphs_;
  std::vector<uint32_t> read_buffer_;  // reused: reads are synchronized before the next
  int next_id_ = 0;
  uint64_t live_bytes_ = 0;
  uint64_t cap_bytes_ = 0;
  bool graphs_on_ = true;
  Tally tally_;
};

}  // namespace truth
