// Per-thread default streams are one handle to the driver
// (CU_STREAM_PER_THREAD) but a stream per thread: tierrt must not let one
// thread's use of a block stand for another's, nor hand one thread's freed
// memory to another as if their work were ordered.
#include <gtest/gtest.h>

#include <thread>

#include "tests/runtime/launch_kernels.h"

namespace tierrt::launch_test {
namespace {

TEST(StreamKeys, EachThreadsPerThreadStreamIsItsOwnAndTheLegacyStreamIsOne) {
  const CUstream mine = StreamIds::key(CU_STREAM_PER_THREAD);
  CUstream theirs = nullptr;
  std::thread([&] { theirs = StreamIds::key(CU_STREAM_PER_THREAD); }).join();
  EXPECT_EQ(mine, StreamIds::key(CU_STREAM_PER_THREAD));
  EXPECT_NE(mine, theirs);
  EXPECT_EQ(CU_STREAM_PER_THREAD, drv::driver_stream(mine));
  EXPECT_EQ(StreamIds::key(nullptr), StreamIds::key(CU_STREAM_LEGACY));
  StreamIds ids;
  EXPECT_EQ(0u, ids.id(StreamIds::key(nullptr)));
  EXPECT_NE(ids.id(mine), ids.id(theirs));
  EXPECT_EQ(ids.id(mine), ids.id(mine));
}

class PerThreadStreams : public EngineFixture<> {};

// Thread A's kernel on its per-thread stream still writes the block when
// thread B's quick kernel on its own per-thread stream, naming the same
// block, has completed; a spill then must wait for A's kernel.
TEST_P(PerThreadStreams, AnotherThreadsUseDoesNotReplaceThisThreadsUse) {
  const size_t bytes = 4u << 20, n = bytes / 4;
  const CUdeviceptr x = allocate(bytes);
  ASSERT_EQ(CUDA_SUCCESS, set(x, 0, n));
  const CUdeviceptr out = allocate(4096);
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));

  std::thread([&] {
    ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSetCurrent, ctx_));
    u64 words = n;
    u32 value = 0xA1, delay_ms = 300;
    EXPECT_EQ(CUDA_SUCCESS, launch(fill_, CU_STREAM_PER_THREAD, {(void*)&x, &words, &value, &delay_ms}));
  }).join();
  std::thread([&] {
    ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSetCurrent, ctx_));
    EXPECT_EQ(CUDA_SUCCESS, launch(ignore_, CU_STREAM_PER_THREAD, {(void*)&x, (void*)&out}));
    EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamSynchronize, CU_STREAM_PER_THREAD));
  }).join();

  ASSERT_TRUE(spill(x));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
  const std::vector<u32> got = download(x, n);
  size_t wrong = 0;
  for (u32 w : got) wrong += w != 0xA1;
  EXPECT_EQ(0u, wrong) << "the spill did not wait for thread A's kernel";
  EXPECT_EQ(CUDA_SUCCESS, free_memory(x));
  EXPECT_EQ(CUDA_SUCCESS, free_memory(out));
}

// A small allocation thread A frees on its per-thread stream while its
// kernel still writes it is not thread B's to write at once.
TEST_P(PerThreadStreams, ASlotFreedOnOneThreadsStreamIsNotAnotherThreadsAtOnce) {
  const size_t words = 64;
  std::thread([&] {
    ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSetCurrent, ctx_));
    const CUdeviceptr slot = allocate(words * 4, CU_STREAM_PER_THREAD);
    u64 n = words;
    u32 value = 0xA2, delay_ms = 300;
    EXPECT_EQ(CUDA_SUCCESS, launch(fill_, CU_STREAM_PER_THREAD, {(void*)&slot, &n, &value, &delay_ms}));
    EXPECT_EQ(CUDA_SUCCESS, free_memory(slot, CU_STREAM_PER_THREAD));
  }).join();
  CUdeviceptr mine = 0;
  std::thread([&] {
    ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSetCurrent, ctx_));
    mine = allocate(words * 4, CU_STREAM_PER_THREAD);
    EXPECT_EQ(CUDA_SUCCESS, engine_->access({{mine, words * 4}}, CU_STREAM_PER_THREAD, [&] {
      return TIERRT_CU(cuMemsetD32Async, mine, 0xB2, words, CU_STREAM_PER_THREAD);
    }));
    EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamSynchronize, CU_STREAM_PER_THREAD));
  }).join();
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
  const std::vector<u32> got = download(mine, words);
  size_t wrong = 0;
  for (u32 w : got) wrong += w != 0xB2;
  EXPECT_EQ(0u, wrong) << "thread A's kernel wrote into thread B's allocation";
  EXPECT_EQ(CUDA_SUCCESS, free_memory(mine));
}

INSTANTIATE_TEST_SUITE_P(All, PerThreadStreams, every_mode_and_policy(), name_of);

}  // namespace
}  // namespace tierrt::launch_test
