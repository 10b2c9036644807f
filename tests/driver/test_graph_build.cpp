// Graphs built node by node (as XLA's command buffers are): memset, kernel
// and memcpy nodes run in dependency order at launch; kernel parameters can
// be read back and changed in the graph, in an executable graph, or by
// updating an executable graph from an edited graph.
#include <vector>

#include "contract.h"

using contract::DeviceBuffer;
using contract::PinnedBuffer;
using contract::Stream;

namespace {

struct FillArgs {
  CUdeviceptr p;
  uint32_t value;
  uint64_t n;
  void* params[3] = {&p, &value, &n};
};

CUDA_KERNEL_NODE_PARAMS kernel_node(CUfunction f, void** params, uint64_t n) {
  CUDA_KERNEL_NODE_PARAMS k{};
  k.func = f;
  k.gridDimX = contract::blocks_for(n);
  k.gridDimY = k.gridDimZ = 1;
  k.blockDimX = 256;
  k.blockDimY = k.blockDimZ = 1;
  k.kernelParams = params;
  return k;
}

CUDA_MEMCPY3D device_to_host(CUdeviceptr src, void* dst, size_t bytes) {
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = dst;
  c.WidthInBytes = bytes;
  c.Height = 1;
  c.Depth = 1;
  return c;
}

std::vector<uint32_t> words(const PinnedBuffer& b, size_t n) {
  return std::vector<uint32_t>(b.as<uint32_t>(), b.as<uint32_t>() + n);
}

}  // namespace

class GraphBuild : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    ASSERT_CU(s_.status());
    ASSERT_CU(a_.status());
    ASSERT_CU(out_.status());
    ASSERT_CU(cuGraphCreate(&g_, 0));
    // memset(a, 1) -> add_one(a) -> copy a to the host
    CUDA_MEMSET_NODE_PARAMS ms{};
    ms.dst = a_.ptr();
    ms.value = 1u;
    ms.elementSize = 4;
    ms.width = kWords;
    ms.height = 1;
    ASSERT_CU(cuGraphAddMemsetNode(&set_, g_, nullptr, 0, &ms, context()));
    CUDA_KERNEL_NODE_PARAMS k = kernel_node(kernels().add_one_u32, add_params_, kWords);
    ASSERT_CU(cuGraphAddKernelNode(&kernel_, g_, &set_, 1, &k));
    CUDA_MEMCPY3D c = device_to_host(a_.ptr(), out_.get(), kWords * 4);
    ASSERT_CU(cuGraphAddMemcpyNode(&copy_, g_, &kernel_, 1, &c, context()));
  }
  void TearDown() override {
    if (g_) {
      EXPECT_CU(cuGraphDestroy(g_));
    }
    DriverTest::TearDown();
  }

  std::vector<uint32_t> run(CUgraphExec exec) {
    std::fill(out_.as<uint32_t>(), out_.as<uint32_t>() + kWords, 0u);
    EXPECT_CU(cuGraphLaunch(exec, s_));
    EXPECT_CU(cuStreamSynchronize(s_));
    return words(out_, kWords);
  }

  static constexpr uint64_t kWords = 1024;
  Stream s_;
  DeviceBuffer a_{kWords * 4};
  PinnedBuffer out_{kWords * 4};
  CUdeviceptr add_ptr_ = a_.ptr();
  uint64_t add_n_ = kWords;
  void* add_params_[2] = {&add_ptr_, &add_n_};
  CUgraph g_ = nullptr;
  CUgraphNode set_ = nullptr, kernel_ = nullptr, copy_ = nullptr;
};

TEST_F(GraphBuild, NodesRunInDependencyOrderOnEveryLaunch) {
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, g_, 0));
  EXPECT_EQ(std::vector<uint32_t>(kWords, 2u), run(exec));
  EXPECT_EQ(std::vector<uint32_t>(kWords, 2u), run(exec));
  size_t count = 0;
  ASSERT_CU(cuGraphGetNodes(g_, nullptr, &count));
  EXPECT_EQ(3u, count);
  EXPECT_CU(cuGraphExecDestroy(exec));
}

TEST_F(GraphBuild, KernelNodeParametersAreCopiedAndReadBack) {
  add_n_ = 1;  // changing the caller's values after the add changes nothing
  CUDA_KERNEL_NODE_PARAMS got{};
  ASSERT_CU(cuGraphKernelNodeGetParams(kernel_, &got));
  EXPECT_EQ(kernels().add_one_u32, got.func);
  EXPECT_EQ(256u, got.blockDimX);
  ASSERT_NE(nullptr, got.kernelParams);
  EXPECT_EQ(a_.ptr(), *static_cast<CUdeviceptr*>(got.kernelParams[0]));
  EXPECT_EQ(kWords, *static_cast<uint64_t*>(got.kernelParams[1]));
}

TEST_F(GraphBuild, ExecutableGraphIsASnapshotWithItsOwnParameters) {
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, g_, 0));
  // Only the first word gets the increment in the executable graph...
  CUdeviceptr p = a_.ptr();
  uint64_t one = 1;
  void* params[2] = {&p, &one};
  CUDA_KERNEL_NODE_PARAMS k = kernel_node(kernels().add_one_u32, params, 1);
  ASSERT_CU(cuGraphExecKernelNodeSetParams(exec, kernel_, &k));
  std::vector<uint32_t> want(kWords, 1u);
  want[0] = 2u;
  EXPECT_EQ(want, run(exec));
  // ...and editing the graph does not touch the executable graph until it is updated.
  FillArgs fill{a_.ptr(), 7u, kWords};
  CUDA_KERNEL_NODE_PARAMS f = kernel_node(kernels().fill_u32, fill.params, kWords);
  ASSERT_CU(cuGraphKernelNodeSetParams(kernel_, &f));
  EXPECT_EQ(want, run(exec));
  CUgraphExecUpdateResultInfo info{};
  ASSERT_CU(cuGraphExecUpdate(exec, g_, &info));
  EXPECT_EQ(CU_GRAPH_EXEC_UPDATE_SUCCESS, info.result);
  EXPECT_EQ(std::vector<uint32_t>(kWords, 7u), run(exec));
  EXPECT_CU(cuGraphExecDestroy(exec));
}

TEST_F(GraphBuild, UpdateFromAGraphOfAnotherShapeFails) {
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, g_, 0));
  CUgraphNode extra = nullptr;
  ASSERT_CU(cuGraphAddEmptyNode(&extra, g_, &copy_, 1));
  CUgraphExecUpdateResultInfo info{};
  EXPECT_EQ(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, cuGraphExecUpdate(exec, g_, &info));
  EXPECT_EQ(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, info.result);
  EXPECT_EQ(std::vector<uint32_t>(kWords, 2u), run(exec));  // still the old graph
  EXPECT_CU(cuGraphExecDestroy(exec));
}
