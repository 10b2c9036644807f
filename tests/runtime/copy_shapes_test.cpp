// The device ranges copies and memsets of every shape touch, and the blocks
// a copy names: every block its bytes overlap, and none that only lies in
// the gaps between its rows. Runs in the spill mode TIERRT_SPILL_MODE names
// (the suite runs in both).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <thread>

#include "runtime/copy_shapes.h"
#include "runtime/engine.h"
#include "tests/runtime/simdev_kernels.h"

namespace tierrt {
namespace {

void expect_range(const StridedRange& r, CUdeviceptr ptr, size_t width, size_t rows, size_t pitch, size_t slices,
                  size_t slice_pitch) {
  EXPECT_EQ(ptr, r.ptr);
  EXPECT_EQ(width, r.width);
  EXPECT_EQ(rows, r.rows);
  EXPECT_EQ(pitch, r.pitch);
  EXPECT_EQ(slices, r.slices);
  if (slices > 1) {
    EXPECT_EQ(slice_pitch, r.slice_pitch);
  }
}

TEST(CopyShapes, A2DCopyTouchesItsDeviceOperandsRowsFromTheirOffsets) {
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = 0x100000;
  c.srcXInBytes = 16;
  c.srcY = 3;
  c.srcPitch = 1024;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = &c;
  c.WidthInBytes = 256;
  c.Height = 7;
  expect_range(copy_source(c), 0x100000 + 3 * 1024 + 16, 256, 7, 1024, 1, 0);
  EXPECT_TRUE(copy_destination(c).empty()) << "a host operand touches no device memory";
  c.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  c.dstDevice = 0x900000;
  c.dstPitch = 512;
  expect_range(copy_destination(c), 0x900000, 256, 7, 512, 1, 0);
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  EXPECT_TRUE(copy_destination(c).empty());
}

TEST(CopyShapes, A3DCopyTouchesEachSliceOfItsOperands) {
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = 0x200000;
  c.srcXInBytes = 8;
  c.srcY = 2;
  c.srcZ = 1;
  c.srcPitch = 256;
  c.srcHeight = 10;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = 0x400000;
  c.dstPitch = 128;
  c.dstHeight = 4;
  c.WidthInBytes = 64;
  c.Height = 4;
  c.Depth = 3;
  expect_range(copy_source(c), 0x200000 + (1 * 10 + 2) * 256 + 8, 64, 4, 256, 3, 2560);
  expect_range(copy_destination(c), 0x400000, 64, 4, 128, 3, 512);

  CUDA_MEMCPY3D_PEER p{};
  p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = 0x200000;
  p.srcZ = 2;
  p.srcPitch = 256;
  p.srcHeight = 10;
  p.dstMemoryType = CU_MEMORYTYPE_HOST;
  p.WidthInBytes = 64;
  p.Height = 4;
  p.Depth = 1;
  expect_range(copy_source(p), 0x200000 + 2 * 10 * 256, 64, 4, 256, 1, 0);
  EXPECT_TRUE(copy_destination(p).empty());
}

TEST(CopyShapes, ABatchOperandIsPackedUnlessItsRowsAndLayersSaySo) {
  CUDA_MEMCPY3D_BATCH_OP op{};
  op.src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  op.src.op.ptr.ptr = 0x300000;
  op.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  op.dst.op.ptr.ptr = 0x500000;
  op.dst.op.ptr.rowLength = 100;
  op.dst.op.ptr.layerHeight = 9;
  op.extent = {40, 5, 2};
  expect_range(copy_source(op), 0x300000, 40, 5, 40, 2, 200);
  expect_range(copy_destination(op), 0x500000, 40, 5, 100, 2, 900);
  op.dst.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
  EXPECT_TRUE(copy_destination(op).empty());
  // Against an array, a row is at most as wide as its widest element allows.
  EXPECT_LE(size_t{40}, copy_source(op).width);
}

TEST(CopyShapes, Memset2DAndStreamMemoryOperations) {
  expect_range(memset_2d(0x100000, 4096, 100, 8, 4), 0x100000, 400, 8, 4096, 1, 0);
  CUstreamBatchMemOpParams ops[4]{};
  ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  ops[0].writeValue.address = 0x700008;
  ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  ops[1].waitValue.address = 0x700000;
  ops[2].flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
  ops[3].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
  expect_range(memory_operation_target(ops[0]), 0x700008, 8, 1, 8, 1, 0);
  expect_range(memory_operation_target(ops[1]), 0x700000, 4, 1, 4, 1, 0);
  EXPECT_TRUE(memory_operation_target(ops[2]).empty());
  EXPECT_TRUE(memory_operation_target(ops[3]).empty());
}

// Three spilled blocks, lowest address first; a copy then names some.
class CopyNamesBlocksTest : public ::testing::Test {
 protected:
  static constexpr size_t kBytes = 4u << 20;

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(testing_simdev::set_up(&k_));
    engine_ = Engine::start();
    ASSERT_NE(nullptr, engine_) << "the engine did not start";
    for (CUdeviceptr& b : blocks_) ASSERT_EQ(CUDA_SUCCESS, engine_->allocate(&b, kBytes, nullptr));
    std::sort(blocks_.begin(), blocks_.end());
    for (CUdeviceptr b : blocks_) ASSERT_TRUE(starts_spill(b));
    ASSERT_TRUE(settled(3)) << "the spills did not complete";
  }
  void TearDown() override {
    EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
    for (CUdeviceptr b : blocks_) {
      if (!b) continue;
      EXPECT_EQ(CUDA_SUCCESS, engine_->free_async(b, nullptr, [] { return CUDA_ERROR_NOT_FOUND; }));
    }
  }

  bool starts_spill(CUdeviceptr p) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!engine_->advise(p, TIERRT_ADVISE_SPILL)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  std::uint64_t spilled() const {
    return engine_->allocator_stats().blocks[static_cast<int>(alloc::State::Spilled)];
  }
  bool settled(std::uint64_t want) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (spilled() != want) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  // What the forwarded call does: a memset of each row the shape touches,
  // on the device, as the driver's copy would touch them.
  CUresult memset_rows(const StridedRange& r) {
    for (size_t z = 0; z < r.slices; ++z)
      for (size_t y = 0; y < r.rows; ++y)
        if (CUresult e = TIERRT_CU(cuMemsetD8Async, r.ptr + z * r.slice_pitch + y * r.pitch, 0x5a, r.width, nullptr))
          return e;
    return TIERRT_CU(cuStreamSynchronize, nullptr);
  }

  testing_simdev::Kernels k_;
  Engine* engine_ = nullptr;
  std::array<CUdeviceptr, 3> blocks_{};
};

TEST_F(CopyNamesBlocksTest, ARangeNamesEveryBlockItOverlapsNotOnlyItsEnds) {
  // From inside the first block to inside the last: the middle one is in it.
  const CUdeviceptr from = blocks_[0] + kBytes - 4096, to = blocks_[2] + 4096;
  const StridedRange r = contiguous(from, to - from);
  EXPECT_EQ(CUDA_SUCCESS, engine_->access_each(1, [&](size_t) { return r; }, nullptr, [&] {
    // Every block the range overlaps is usable by the work, in both modes.
    EXPECT_EQ(0u, spilled()) << "a block inside the range is still spilled";
    CUresult e = CUDA_SUCCESS;
    for (CUdeviceptr b : blocks_)
      if (!e) e = memset_rows(contiguous(std::max(b, from), std::min(b + kBytes, to) - std::max(b, from)));
    return e;
  }));
}

TEST_F(CopyNamesBlocksTest, ARowCopyNamesTheBlocksItsRowsTouchAndNotThoseBetweenThem) {
  // Two rows, one at the start of the first block and one at the start of
  // the last: the middle block lies between them, untouched.
  const StridedRange rows{blocks_[0], 4096, 2, blocks_[2] - blocks_[0], 1, 0};
  EXPECT_EQ(CUDA_SUCCESS, engine_->access_each(1, [&](size_t) { return rows; }, nullptr, [&] {
    EXPECT_EQ(1u, spilled()) << "the block between the rows should stay spilled";
    return memset_rows(rows);
  }));
  // The same as two slices of one row each.
  const StridedRange slices{blocks_[0] + 8192, 4096, 1, 4096, 2, blocks_[2] - blocks_[0]};
  EXPECT_EQ(CUDA_SUCCESS, engine_->access_each(1, [&](size_t) { return slices; }, nullptr, [&] {
    EXPECT_EQ(1u, spilled()) << "the block between the slices should stay spilled";
    return memset_rows(slices);
  }));
}

TEST_F(CopyNamesBlocksTest, ACopyWhoseRowsCrossEveryBlockNamesThemAll) {
  // A row every 64 KiB from the first block's start to the last block's end.
  const size_t pitch = 64u << 10;
  const StridedRange rows{blocks_[0], 4096, (blocks_[2] + kBytes - blocks_[0]) / pitch, pitch, 1, 0};
  EXPECT_EQ(CUDA_SUCCESS, engine_->access_each(1, [&](size_t) { return rows; }, nullptr, [&] {
    EXPECT_EQ(0u, spilled()) << "a block the rows cross is still spilled";
    return CUDA_SUCCESS;
  }));
}

}  // namespace
}  // namespace tierrt
