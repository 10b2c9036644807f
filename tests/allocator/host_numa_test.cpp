// The host tier on the GPU's NUMA node (simdev's SIMDEV_HOST_NUMA_ID names
// it). Copy mode binds its pinned chunks to the node (MPOL_PREFERRED) and
// the pages are there; a device naming no node leaves them to first touch;
// a node this host lacks is reported (Stats::host_node_problem) and the
// chunks go unplaced, every spill still keeping its bytes. Remap mode
// reports where its host chunks are created. One process per node setting:
// NodeZero.* (0), NoNode.* (-1), AbsentNode.* (7).
#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

#include "tests/allocator/sim_support.h"

namespace tierrt::alloc::testing {
namespace {

constexpr std::size_t MiB = 1u << 20;
constexpr int kMaskBits = 1024;  // as wide as any kernel's node count
constexpr int kWordBits = 8 * sizeof(unsigned long);

int device_node() {
  int node = -2;
  EXPECT_EQ(cuDeviceGetAttribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, Env::get().dev), CUDA_SUCCESS);
  return node;
}

bool has_bit(const unsigned long* mask, int node) { return (mask[node / kWordBits] >> (node % kWordBits)) & 1ul; }

// Whether this process may allocate on `node`.
bool node_allowed(int node) {
  unsigned long allowed[kMaskBits / kWordBits] = {};
  if (syscall(SYS_get_mempolicy, nullptr, allowed, static_cast<unsigned long>(kMaskBits), nullptr,
              MPOL_F_MEMS_ALLOWED) != 0)
    return false;
  return node >= 0 && node < kMaskBits && has_bit(allowed, node);
}

// The kernel's memory policy for the page at `p`, and the node it is on.
struct PagePlace {
  int mode = -1;
  unsigned long mask[kMaskBits / kWordBits] = {};
  int node = -1;
};
PagePlace place_of(void* p) {
  PagePlace pp;
  EXPECT_EQ(syscall(SYS_get_mempolicy, &pp.mode, pp.mask, static_cast<unsigned long>(kMaskBits), p, MPOL_F_ADDR), 0);
  EXPECT_EQ(syscall(SYS_get_mempolicy, &pp.node, nullptr, 0ul, p, MPOL_F_ADDR | MPOL_F_NODE), 0);
  return pp;
}

std::unique_ptr<Allocator> make(SpillMode m) {
  Env::get().bind();
  Options o;
  o.mode = m;
  o.pinned_chunk = 8 * MiB;  // several chunks for a few blocks
  CUresult r = CUDA_SUCCESS;
  auto a = Allocator::create(o, &r);
  EXPECT_EQ(r, CUDA_SUCCESS);
  if (a) {
    EXPECT_EQ(a->mode(), m);
  }
  return a;
}

// Blocks of 4 MiB, each filled with its own pattern and spilled.
std::vector<Block*> spill_blocks(Allocator& a, int count) {
  std::vector<Block*> bs;
  for (int i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    EXPECT_EQ(a.allocate(&p, 4 * MiB, nullptr), CUDA_SUCCESS);
    bs.push_back(a.lookup(p));
    EXPECT_EQ(fill(a, bs.back(), nullptr, 700 + i), CUDA_SUCCESS);
  }
  for (Block* b : bs) EXPECT_EQ(a.spill(b), SpillResult::Started);
  a.drain();
  for (Block* b : bs) EXPECT_EQ(b->st(), State::Spilled);
  return bs;
}

// Every byte comes back, then the blocks are freed.
void check_and_free(Allocator& a, const std::vector<Block*>& bs) {
  for (std::size_t i = 0; i < bs.size(); ++i) {
    std::vector<std::uint8_t> got;
    EXPECT_EQ(read(a, bs[i], &got), CUDA_SUCCESS);
    EXPECT_EQ(got, expected(4 * MiB, 700 + i)) << "block " << i;
  }
  for (Block* b : bs) EXPECT_EQ(a.free(b->va, nullptr), CUDA_SUCCESS);
}

TEST(NodeZero, CopyChunksAreBoundToTheDevicesNode) {
  ASSERT_EQ(device_node(), 0) << "run with SIMDEV_HOST_NUMA_ID=0";
  if (!node_allowed(0)) GTEST_SKIP() << "node 0 holds no memory this process may use";
  auto a = make(SpillMode::Copy);
  const std::vector<Block*> bs = spill_blocks(*a, 4);
  for (Block* b : bs) {
    ASSERT_NE(b->host.buf, nullptr);
    const PagePlace pp = place_of(b->host.buf);
    EXPECT_EQ(pp.mode, MPOL_PREFERRED);
    EXPECT_TRUE(has_bit(pp.mask, 0));
    EXPECT_EQ(pp.node, 0);
  }
  const Stats s = a->stats();
  EXPECT_EQ(s.host_placement, HostPlacement::OnNode);
  EXPECT_EQ(s.host_node, 0);
  EXPECT_EQ(s.host_node_problem, nullptr);
  EXPECT_GT(s.pinned_pool_bytes, 0u);
  EXPECT_GT(s.host_node_bytes, 0u);
  // Pages the node had no room for went elsewhere (MPOL_PREFERRED), counted.
  EXPECT_EQ(s.host_node_bytes + s.host_unplaced_bytes, s.pinned_pool_bytes);
  check_and_free(*a, bs);
}

TEST(NodeZero, AfterARefusedRegistrationChunksAreUnplaced) {
  ASSERT_EQ(device_node(), 0) << "run with SIMDEV_HOST_NUMA_ID=0";
  if (!node_allowed(0)) GTEST_SKIP() << "node 0 holds no memory this process may use";
  auto a = make(SpillMode::Copy);
  const unsigned long long fired = simdev_faults_fired();
  ASSERT_EQ(simdev_inject_fault("cuMemHostRegister_v2", 1, 0), 0);
  const std::vector<Block*> bs = spill_blocks(*a, 4);
  simdev_clear_faults();
  EXPECT_EQ(simdev_faults_fired(), fired + 1);
  for (Block* b : bs) EXPECT_EQ(place_of(b->host.buf).mode, MPOL_DEFAULT);
  // Every chunk came from cuMemHostAlloc, anywhere: a driver that refuses
  // once is not asked again.
  const Stats s = a->stats();
  EXPECT_EQ(s.host_placement, HostPlacement::Unplaced);
  EXPECT_EQ(s.host_node, 0);
  ASSERT_NE(s.host_node_problem, nullptr);
  EXPECT_NE(std::string(s.host_node_problem).find("cuMemHostRegister"), std::string::npos) << s.host_node_problem;
  EXPECT_EQ(s.host_node_bytes, 0u);
  EXPECT_GT(s.pinned_pool_bytes, 0u);
  EXPECT_EQ(s.host_unplaced_bytes, s.pinned_pool_bytes);
  check_and_free(*a, bs);
}

TEST(NodeZero, RemapChunksAreCreatedOnTheDevicesNode) {
  ASSERT_EQ(device_node(), 0) << "run with SIMDEV_HOST_NUMA_ID=0";
  auto a = make(SpillMode::Remap);
  const std::vector<Block*> bs = spill_blocks(*a, 3);
  const Stats s = a->stats();
  EXPECT_EQ(s.host_placement, HostPlacement::OnNode);
  EXPECT_EQ(s.host_node, 0);
  EXPECT_EQ(s.host_node_bytes, s.host_used);  // one chunk per spilled block, no spare yet
  EXPECT_EQ(s.host_node_bytes, 3 * bs[0]->mapped);
  check_and_free(*a, bs);
}

TEST(NoNode, CopyChunksAreLeftToFirstTouch) {
  ASSERT_EQ(device_node(), -1) << "run with SIMDEV_HOST_NUMA_ID=-1";
  auto a = make(SpillMode::Copy);
  const std::vector<Block*> bs = spill_blocks(*a, 3);
  for (Block* b : bs) EXPECT_EQ(place_of(b->host.buf).mode, MPOL_DEFAULT);
  const Stats s = a->stats();
  EXPECT_EQ(s.host_placement, HostPlacement::FirstTouch);
  EXPECT_EQ(s.host_node, -1);
  EXPECT_EQ(s.host_node_problem, nullptr);
  EXPECT_EQ(s.host_node_bytes, 0u);
  EXPECT_EQ(s.host_unplaced_bytes, s.pinned_pool_bytes);
  check_and_free(*a, bs);
}

TEST(NoNode, RemapChunksAreTheDriversChoice) {
  ASSERT_EQ(device_node(), -1) << "run with SIMDEV_HOST_NUMA_ID=-1";
  auto a = make(SpillMode::Remap);
  const std::vector<Block*> bs = spill_blocks(*a, 2);
  const Stats s = a->stats();
  EXPECT_EQ(s.host_placement, HostPlacement::DriverChoice);
  EXPECT_EQ(s.host_node, -1);
  EXPECT_EQ(s.host_node_bytes, 0u);
  check_and_free(*a, bs);
}

TEST(AbsentNode, CopyIsUnplacedAndSpillsKeepEveryByte) {
  ASSERT_EQ(device_node(), 7) << "run with SIMDEV_HOST_NUMA_ID=7";
  if (node_allowed(7)) GTEST_SKIP() << "this host has a node 7";
  auto a = make(SpillMode::Copy);
  const Stats before = a->stats();
  EXPECT_EQ(before.host_placement, HostPlacement::Unplaced);  // known before the first spill
  ASSERT_NE(before.host_node_problem, nullptr);
  EXPECT_NE(std::string(before.host_node_problem).find("not a memory node"), std::string::npos)
      << before.host_node_problem;
  const std::vector<Block*> bs = spill_blocks(*a, 4);
  for (Block* b : bs) EXPECT_EQ(place_of(b->host.buf).mode, MPOL_DEFAULT);
  const Stats s = a->stats();
  EXPECT_EQ(s.host_placement, HostPlacement::Unplaced);
  EXPECT_EQ(s.host_node, 7);
  EXPECT_EQ(s.host_node_bytes, 0u);
  EXPECT_GT(s.pinned_pool_bytes, 0u);
  EXPECT_EQ(s.host_unplaced_bytes, s.pinned_pool_bytes);
  check_and_free(*a, bs);
}

}  // namespace
}  // namespace tierrt::alloc::testing
