// Graphs under tierrt: the blocks an executable graph names are made
// resident at each cuGraphLaunch and may move between launches, whether the
// graph was captured or built node by node; what tierrt knows of each graph
// follows instantiation, node changes and updates.
#include <algorithm>
#include <atomic>

#include "runtime/graph_registry.h"
#include "tests/runtime/graph_test_support.h"

namespace tierrt {
namespace {

using testing_graphs::driver_fn;
using testing_graphs::GraphTest;

// Captured graphs: one writes a block, one checks it. Between their launches
// the block spills; the check's launch brings it back.
TEST_F(GraphTest, BlocksACapturedGraphNamesMoveBetweenLaunches) {
  const CUdeviceptr a = allocate(kBytes, s_);
  ASSERT_EQ(CUDA_SUCCESS, begin(s_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_EQ(CUDA_SUCCESS, write(a, 9, s_));
  CUgraph writes = end(s_);
  ASSERT_EQ(CUDA_SUCCESS, begin(s_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_EQ(CUDA_SUCCESS, check(a, 9, s_));
  CUgraph checks = end(s_);
  CUgraphExec write_exec = instantiate(writes), check_exec = instantiate(checks);

  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(CUDA_SUCCESS, launch_graph(write_exec, s_));
    ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamSynchronize, s_));
    ASSERT_NO_FATAL_FAILURE(spill_fully(a)) << "a block a graph names stayed pinned after its launch";
    const std::uint64_t fetches = e_->allocator_stats().fetches;
    ASSERT_EQ(CUDA_SUCCESS, launch_graph(check_exec, other_));
    EXPECT_EQ(0u, wrong()) << "round " << round << ": the graph ran on bytes that were not the block's";
    EXPECT_GT(e_->allocator_stats().fetches, fetches) << "the graph's launch did not fetch its block";
  }
  destroy(writes, write_exec);
  destroy(checks, check_exec);
  EXPECT_EQ(CUDA_SUCCESS, free_now(a));
}

// The parameters of a kernel node as cuGraphAddKernelNode takes them.
struct CheckNode {
  CUdeviceptr act;
  size_t n;
  std::uint32_t step, layer;
  CUdeviceptr bad;
  void* params[5];
  CUDA_KERNEL_NODE_PARAMS p{};
  CheckNode(CUfunction f, CUdeviceptr a, std::uint32_t s, CUdeviceptr b)
      : act(a), n(GraphTest::kWords), step(s), layer(0), bad(b), params{&act, &n, &step, &layer, &bad} {
    p.func = f;
    p.gridDimX = p.gridDimY = p.gridDimZ = p.blockDimX = p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = params;
  }
};

// A graph built node by node (as XLA's command buffers are), and its
// executable graph's node pointed at another block: each launch makes the
// block it names now resident.
TEST_F(GraphTest, KernelNodesAddedAndChangedNameTheirBlocks) {
  auto create = driver_fn<decltype(&cuGraphCreate)>("cuGraphCreate");
  auto add_kernel = driver_fn<decltype(&cuGraphAddKernelNode_v2)>("cuGraphAddKernelNode_v2");
  auto exec_set = driver_fn<decltype(&cuGraphExecKernelNodeSetParams_v2)>("cuGraphExecKernelNodeSetParams_v2");
  if (!create || !add_kernel || !exec_set) GTEST_SKIP() << "this driver builds no graph node by node";

  const CUdeviceptr a = allocate(kBytes, s_), b = allocate(kBytes, s_);
  ASSERT_EQ(CUDA_SUCCESS, write(a, 5, s_));
  ASSERT_EQ(CUDA_SUCCESS, write(b, 6, s_));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
  CUgraph g = nullptr;
  ASSERT_EQ(CUDA_SUCCESS, create(&g, 0));
  CUgraphNode node = nullptr;
  CheckNode on_a(k_.check, a, 5, bad_);
  const CUresult added =
      e_->graph_add_kernel_node(&node, g, &on_a.p, [&] { return add_kernel(&node, g, nullptr, 0, &on_a.p); });
  if (added == CUDA_ERROR_NOT_SUPPORTED) {
    destroy(g, nullptr);
    EXPECT_EQ(CUDA_SUCCESS, free_now(a));
    EXPECT_EQ(CUDA_SUCCESS, free_now(b));
    GTEST_SKIP() << "this driver builds no graph node by node";
  }
  ASSERT_EQ(CUDA_SUCCESS, added);
  CUgraphExec exec = instantiate(g);

  ASSERT_NO_FATAL_FAILURE(spill_fully(a));
  ASSERT_EQ(CUDA_SUCCESS, launch_graph(exec, s_));
  EXPECT_EQ(0u, wrong()) << "a node added by hand ran on bytes that were not its block's";

  CheckNode on_b(k_.check, b, 6, bad_);
  ASSERT_EQ(CUDA_SUCCESS, e_->graph_exec_set_kernel_node(exec, node, &on_b.p, [&] {
    return exec_set(exec, node, &on_b.p);
  }));
  ASSERT_NO_FATAL_FAILURE(spill_fully(b));
  ASSERT_EQ(CUDA_SUCCESS, launch_graph(exec, s_));
  EXPECT_EQ(0u, wrong()) << "a changed node ran on bytes that were not its new block's";
  destroy(g, exec);
  EXPECT_EQ(CUDA_SUCCESS, free_now(a));
  EXPECT_EQ(CUDA_SUCCESS, free_now(b));
}

// A small allocation (a slab slot) a captured graph names: each launch of
// the graph records its use on the slab, so the slot, freed while the
// graph's work waits on its stream, is not handed out again to an
// allocation every stream may use at once.
TEST_F(GraphTest, ASlotACapturedGraphNamesWaitsForTheGraphOnceFreed) {
  constexpr size_t kSlotBytes = 64u << 10;
  const CUdeviceptr slot = allocate(kSlotBytes, s_);
  ASSERT_EQ(CUDA_SUCCESS, begin(s_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_EQ(CUDA_SUCCESS, e_->access({{slot, kSlotBytes}}, s_, [&] {
    return TIERRT_CU(cuMemsetD32Async, slot, 7u, kSlotBytes / 4, s_);
  }));
  CUgraph g = end(s_);
  CUgraphExec exec = instantiate(g);

  // The graph's launch waits behind a host function until the gate opens.
  std::atomic<bool> open{false};
  struct Gate {
    std::atomic<bool>& open;
    ~Gate() { open = true; }
  } opens_at_exit{open};
  auto launch_host_fn = driver_fn<decltype(&cuLaunchHostFunc)>("cuLaunchHostFunc");
  ASSERT_NE(nullptr, launch_host_fn);
  CUhostFn wait_for_gate = [](void* gate) {
    while (!static_cast<std::atomic<bool>*>(gate)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  ASSERT_EQ(CUDA_SUCCESS, launch_host_fn(other_, wait_for_gate, &open));
  CUevent gate = nullptr;
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuEventCreate, &gate, CU_EVENT_DISABLE_TIMING));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuEventRecord, gate, other_));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamWaitEvent, s_, gate, 0u));
  ASSERT_EQ(CUDA_SUCCESS, launch_graph(exec, s_));

  ASSERT_EQ(CUDA_SUCCESS, free_now(slot));
  const CUdeviceptr again = allocate(kSlotBytes, nullptr);
  EXPECT_NE(slot, again) << "a slot was handed out again while a graph that names it had not run";
  open = true;
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
  EXPECT_EQ(CUDA_SUCCESS, free_now(again));
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuEventDestroy, gate));
  destroy(g, exec);
}

// What the registry keeps, without a driver.
CUgraph graph(std::uintptr_t n) { return reinterpret_cast<CUgraph>(n); }
CUgraphExec exec(std::uintptr_t n) { return reinterpret_cast<CUgraphExec>(n); }
CUgraphNode node(std::uintptr_t n) { return reinterpret_cast<CUgraphNode>(n); }

TEST(GraphRegistry, ACaptureBelongsToTheGraphItMadeAndItsExecutableGraphs) {
  GraphRegistry r;
  r.captured(7, node(1), {0x1000}, true);
  r.captured(7, nullptr, {0x2000}, true);
  r.captured(7, nullptr, {0x3000}, true);
  EXPECT_EQ(nullptr, r.named(exec(1))) << "an executable graph tierrt never saw";
  r.capture_ended(7, graph(1));
  r.instantiated(graph(1), exec(1));
  auto named = r.named(exec(1));
  ASSERT_NE(nullptr, named);
  EXPECT_EQ(3u, named->blocks.size());
  EXPECT_FALSE(named->unknown);
  // A capture into the same graph later (cuStreamBeginCaptureToGraph) adds.
  r.captured(8, node(2), {0x4000}, true);
  r.capture_ended(8, graph(1));
  r.instantiated(graph(1), exec(2));
  EXPECT_EQ(4u, r.named(exec(2))->blocks.size());
  EXPECT_EQ(3u, r.named(exec(1))->blocks.size()) << "an executable graph changed with its graph";
}

TEST(GraphRegistry, NodeChangesReplaceWhatTheNodeNamed) {
  GraphRegistry r;
  r.node_set(graph(1), node(1), {0x1000}, true);
  r.node_set(graph(1), node(2), {0x2000}, true);
  r.node_set(node(1), {0x5000}, true);  // cuGraphKernelNodeSetParams
  r.instantiated(graph(1), exec(1));
  auto blocks = r.named(exec(1))->blocks;
  std::sort(blocks.begin(), blocks.end());
  EXPECT_EQ((GraphRegistry::Addresses{0x2000, 0x5000}), blocks);
  r.exec_node_set(exec(1), node(2), {0x6000}, true);  // cuGraphExecKernelNodeSetParams
  blocks = r.named(exec(1))->blocks;
  std::sort(blocks.begin(), blocks.end());
  EXPECT_EQ((GraphRegistry::Addresses{0x5000, 0x6000}), blocks);
  r.node_set(graph(1), node(2), {0x7000}, true);
  r.instantiated(graph(1), exec(1));  // cuGraphExecUpdate
  blocks = r.named(exec(1))->blocks;
  std::sort(blocks.begin(), blocks.end());
  EXPECT_EQ((GraphRegistry::Addresses{0x5000, 0x7000}), blocks);
  r.exec_destroyed(exec(1));
  EXPECT_EQ(nullptr, r.named(exec(1)));
}

TEST(GraphRegistry, ANodeTierrtCouldNotReadMakesItsGraphUnknown) {
  GraphRegistry r;
  r.node_set(graph(1), node(1), {0x1000}, true);
  r.node_set(graph(1), node(2), {}, false);
  r.instantiated(graph(1), exec(1));
  EXPECT_TRUE(r.named(exec(1))->unknown);
  r.exec_node_set(exec(1), node(2), {0x2000}, true);
  EXPECT_FALSE(r.named(exec(1))->unknown) << "the node is read now";
}

TEST(GraphRegistry, ACapturedFreeIsHandedOutOnceAndNotAtAllWhenTheCaptureFailed) {
  GraphRegistry r;
  r.captured_free(1, 0x1000);
  r.capture_ended(1, graph(1));
  r.instantiated(graph(1), exec(1));
  r.instantiated(graph(1), exec(2));
  EXPECT_EQ((GraphRegistry::Addresses{0x1000}), r.take_frees(exec(2)));
  EXPECT_TRUE(r.take_frees(exec(1)).empty());
  EXPECT_TRUE(r.take_frees(exec(2)).empty());
  r.captured_free(2, 0x2000);
  r.capture_ended(2, nullptr);
  r.instantiated(graph(1), exec(3));
  EXPECT_TRUE(r.take_frees(exec(3)).empty());
}

}  // namespace
}  // namespace tierrt
