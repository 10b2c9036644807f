// Blocks a kernel reaches through a pointer table in device memory: a small
// host-to-device copy of pointers makes the destination a table, and a
// launch naming the table names the blocks it points to (fetched before the
// kernel runs, their use recorded), as does a device-to-device copy of it.
#include <gtest/gtest.h>

#include "tests/runtime/launch_kernels.h"

namespace tierrt::launch_test {
namespace {

using Params = std::tuple<alloc::SpillMode, Policy, bool>;  // the table is a block (else a small slot)

class PointerTablesTest : public EngineFixture<Params> {
 protected:
  static constexpr size_t kBytes = 4u << 20, kWords = kBytes / 4;
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(EngineFixture::SetUp());
    for (int i = 0; i < 2; ++i) {
      target_[i] = allocate(kBytes);
      ASSERT_EQ(CUDA_SUCCESS, set(target_[i], 0x11u * (i + 1), kWords));
    }
    out_ = allocate(4096);
  }
  void TearDown() override {
    for (CUdeviceptr t : target_) EXPECT_EQ(CUDA_SUCCESS, free_memory(t));
    EXPECT_EQ(CUDA_SUCCESS, free_memory(out_));
    EngineFixture::TearDown();
  }
  // A table of the two targets at `table`, uploaded from the host.
  void upload_table(CUdeviceptr table) {
    const u64 pointers[2] = {target_[0], target_[1]};
    ASSERT_EQ(CUDA_SUCCESS, upload(table, pointers, sizeof pointers));
  }
  void spill_targets() {
    for (CUdeviceptr t : target_) ASSERT_TRUE(spill(t));
    ASSERT_EQ(2u, spilled());
  }
  // The kernel reads both targets through the table: every byte as written.
  void gather_through(CUdeviceptr table) {
    u64 count = 2, words = kWords;
    ASSERT_EQ(CUDA_SUCCESS, launch(gather_, nullptr, {(void*)&table, &count, (void*)&out_, &words}));
    EXPECT_EQ(0u, spilled()) << "a block the table points to was not made resident for the launch";
    ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
    const std::vector<u32> got = download(out_, 4);
    EXPECT_EQ(kWords, got[0]);
    EXPECT_EQ(kWords, got[1]);
    EXPECT_EQ(0x11u, got[2]);
    EXPECT_EQ(0x22u, got[3]);
  }
  size_t table_bytes() const { return std::get<2>(GetParam()) ? 2u << 20 : 64; }

  CUdeviceptr target_[2] = {}, out_ = 0;
};

TEST_P(PointerTablesTest, ALaunchNamingATableNamesTheBlocksItPointsTo) {
  const CUdeviceptr table = allocate(table_bytes());
  ASSERT_NO_FATAL_FAILURE(upload_table(table));
  ASSERT_NO_FATAL_FAILURE(spill_targets());
  ASSERT_NO_FATAL_FAILURE(gather_through(table));
  EXPECT_EQ(CUDA_SUCCESS, free_memory(table));
}

TEST_P(PointerTablesTest, ACopyOfATableOnTheDevicePointsWhereTheTableDoes) {
  const CUdeviceptr table = allocate(table_bytes()), copy = allocate(table_bytes());
  ASSERT_NO_FATAL_FAILURE(upload_table(table));
  ASSERT_EQ(CUDA_SUCCESS, engine_->copy_on_device(copy, table, 16, nullptr, [&] {
    return TIERRT_CU(cuMemcpyDtoD, copy, table, 16);
  }));
  ASSERT_NO_FATAL_FAILURE(spill_targets());
  ASSERT_NO_FATAL_FAILURE(gather_through(copy));
  EXPECT_EQ(CUDA_SUCCESS, free_memory(table));
  EXPECT_EQ(CUDA_SUCCESS, free_memory(copy));
}

TEST_P(PointerTablesTest, ATableOverwrittenWithoutPointersNamesNothing) {
  const CUdeviceptr table = allocate(table_bytes());
  ASSERT_NO_FATAL_FAILURE(upload_table(table));
  const u64 zeros[2] = {0, 0};
  ASSERT_EQ(CUDA_SUCCESS, upload(table, zeros, sizeof zeros));
  ASSERT_NO_FATAL_FAILURE(spill_targets());
  ASSERT_EQ(CUDA_SUCCESS, launch(ignore_, nullptr, {(void*)&table, (void*)&out_}));
  EXPECT_EQ(2u, spilled()) << "a table whose pointers were overwritten still named its old targets";
  EXPECT_EQ(CUDA_SUCCESS, free_memory(table));
}

class SmallScanLimit : public PointerTablesTest {
 protected:
  void adjust(Settings& s) override { s.pointer_scan_bytes = 8; }
};

TEST_P(SmallScanLimit, CopiesLargerThanTheScanLimitAreNotRead) {
  const CUdeviceptr table = allocate(table_bytes());
  ASSERT_NO_FATAL_FAILURE(upload_table(table));
  ASSERT_NO_FATAL_FAILURE(spill_targets());
  ASSERT_EQ(CUDA_SUCCESS, launch(ignore_, nullptr, {(void*)&table, (void*)&out_}));
  EXPECT_EQ(2u, spilled()) << "a copy above TIERRT_POINTER_SCAN_BYTES was read";
  EXPECT_EQ(CUDA_SUCCESS, free_memory(table));
}

TEST_P(PointerTablesTest, AFreedTargetIsIgnoredAndAFreedTableForgotten) {
  const CUdeviceptr table = allocate(table_bytes());
  ASSERT_NO_FATAL_FAILURE(upload_table(table));
  ASSERT_EQ(CUDA_SUCCESS, free_memory(target_[0]));
  ASSERT_TRUE(spill(target_[1]));
  // The table still holds the freed block's address; nothing reads it.
  ASSERT_EQ(CUDA_SUCCESS, launch(ignore_, nullptr, {(void*)&table, (void*)&out_}));
  EXPECT_EQ(0u, spilled());
  target_[0] = allocate(kBytes);
  ASSERT_TRUE(spill(target_[1]));
  ASSERT_EQ(CUDA_SUCCESS, free_memory(table));
  // Whatever takes the table's place holds no pointers.
  const CUdeviceptr again = allocate(table_bytes());
  ASSERT_EQ(CUDA_SUCCESS, launch(ignore_, nullptr, {(void*)&again, (void*)&out_}));
  EXPECT_EQ(1u, spilled()) << "a freed table's pointers outlived it";
  EXPECT_EQ(CUDA_SUCCESS, free_memory(again));
}

std::string params_name(const ::testing::TestParamInfo<Params>& info) {
  return name_of({{std::get<0>(info.param), std::get<1>(info.param)}, info.index}) +
         (std::get<2>(info.param) ? "TableBlock" : "TableSlot");
}
auto all_params() {
  return ::testing::Combine(::testing::Values(alloc::SpillMode::Remap, alloc::SpillMode::Copy),
                            ::testing::Values(Policy::Planner, Policy::Reactive), ::testing::Bool());
}
INSTANTIATE_TEST_SUITE_P(All, PointerTablesTest, all_params(), params_name);
INSTANTIATE_TEST_SUITE_P(All, SmallScanLimit, all_params(), params_name);

}  // namespace
}  // namespace tierrt::launch_test
