// Occupancy queries: how many blocks of a kernel fit on one multiprocessor,
// the block size that fills it best, and the dynamic shared memory left per
// block. The expectations are written in terms of the device's own
// attributes. The contract kernels are small, so registers never limit them.
#include <algorithm>
#include <vector>

#include "contract.h"

namespace {

class OccupancyTest : public DriverTest {
 protected:
  int blocks(int block_size, size_t shared) {
    int n = -1;
    EXPECT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernels().fill_u32, block_size, shared));
    return n;
  }
  int threads_per_sm() const { return attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR); }
  int blocks_per_sm() const { return attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR); }
  int threads_per_block() const { return attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK); }
};

// What MaxPotentialBlockSize asked its callback for.
std::vector<int> g_asked;
size_t g_shared_above_256 = 0;

size_t CUDA_CB shared_for_block_size(int block_size) {
  g_asked.push_back(block_size);
  return block_size > 256 ? g_shared_above_256 : 0;
}

}  // namespace

TEST_F(OccupancyTest, ActiveBlocksFollowTheThreadAndBlockLimits) {
  for (int bs : {32, 64, 128, 256, 512, 1024}) {
    EXPECT_EQ(std::min(blocks_per_sm(), threads_per_sm() / bs), blocks(bs, 0)) << bs;
  }
  // A partial warp takes a whole warp's slots.
  EXPECT_EQ(blocks(64, 0), blocks(33, 0));
}

TEST_F(OccupancyTest, DynamicSharedMemoryLowersActiveBlocks) {
  const int shared_per_sm = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
  const size_t shared = 40 << 10;
  const int n = blocks(256, shared);
  EXPECT_GE(n, 1);
  EXPECT_LE(n * static_cast<long long>(shared), shared_per_sm);
  EXPECT_LT(n, blocks(256, 0));
}

TEST_F(OccupancyTest, FlagsVariantAnswersTheSame) {
  for (unsigned flags : {CU_OCCUPANCY_DEFAULT, CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE}) {
    int n = -1;
    ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, kernels().fill_u32, 256, 0, flags));
    EXPECT_EQ(blocks(256, 0), n);
  }
}

TEST_F(OccupancyTest, MaxPotentialBlockSizeFillsTheMultiprocessor) {
  int min_grid = 0, block_size = 0;
  ASSERT_CU(cuOccupancyMaxPotentialBlockSize(&min_grid, &block_size, kernels().fill_u32, nullptr, 0, 0));
  ASSERT_GT(block_size, 0);
  EXPECT_LE(block_size, threads_per_block());
  EXPECT_EQ(threads_per_sm(), block_size * blocks(block_size, 0));
  EXPECT_EQ(blocks(block_size, 0) * attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), min_grid);

  ASSERT_CU(cuOccupancyMaxPotentialBlockSizeWithFlags(&min_grid, &block_size, kernels().fill_u32, nullptr, 0, 100,
                                                      CU_OCCUPANCY_DEFAULT));
  EXPECT_GT(block_size, 0);
  EXPECT_LE(block_size, 100);
}

TEST_F(OccupancyTest, MaxPotentialBlockSizeAsksTheCallbackPerBlockSize) {
  // Block sizes above 256 would need more shared memory than a block may
  // have: the answer must come from the sizes at or below 256.
  g_asked.clear();
  g_shared_above_256 = static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)) + 4096;
  int min_grid = 0, block_size = 0;
  ASSERT_CU(cuOccupancyMaxPotentialBlockSize(&min_grid, &block_size, kernels().fill_u32, shared_for_block_size,
                                             1 << 30, 0));
  ASSERT_FALSE(g_asked.empty());
  EXPECT_GT(block_size, 0);
  EXPECT_LE(block_size, 256);
  EXPECT_NE(g_asked.end(), std::find(g_asked.begin(), g_asked.end(), block_size));
  for (int asked : g_asked) {
    EXPECT_GT(asked, 0);
    EXPECT_LE(asked, threads_per_block());
  }
  // The largest block size is tried, and so is the one chosen.
  EXPECT_EQ(threads_per_block(), *std::max_element(g_asked.begin(), g_asked.end()));
  EXPECT_EQ(blocks(block_size, 0) * attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), min_grid);
}

TEST_F(OccupancyTest, AvailableDynamicSharedMemoryLetsTheBlocksFit) {
  for (int num_blocks : {1, 2, 4}) {
    size_t available = 0;
    ASSERT_CU(cuOccupancyAvailableDynamicSMemPerBlock(&available, kernels().fill_u32, num_blocks, 256));
    EXPECT_GT(available, 0u) << num_blocks;
    EXPECT_LE(available, static_cast<size_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)));
    EXPECT_GE(blocks(256, available), num_blocks) << num_blocks << " blocks with " << available << " bytes each";
  }
}
