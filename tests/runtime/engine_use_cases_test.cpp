// The engine's use cases beyond the training loop (engine_test.cpp), on the
// running engine in-process, with the reactive policy: nothing moves a block
// unless the test asks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "runtime/engine.h"
#include "tests/runtime/simdev_kernels.h"

namespace tierrt {
namespace {

class EngineUseCasesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(testing_simdev::set_up(&k_));
    engine_ = Engine::start();
    ASSERT_NE(nullptr, engine_) << "the engine did not start";
  }

  CUdeviceptr allocate(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(CUDA_SUCCESS, engine_->allocate(&p, bytes, nullptr));
    return p;
  }
  CUresult free_tracked(CUdeviceptr p) {
    return engine_->free_async(p, nullptr, [] { return CUDA_ERROR_NOT_FOUND; });
  }
  bool advise(CUdeviceptr p, tierrt_advice a) { return engine_->advise(p, a); }
  // A spill is refused while an earlier move of the block is being finalised
  // (the allocator's Busy); that passes, a pin does not.
  bool spills_soon(CUdeviceptr p) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!advise(p, TIERRT_ADVISE_SPILL)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  testing_simdev::Kernels k_;
  Engine* engine_ = nullptr;
};

TEST_F(EngineUseCasesTest, UnpinReleasesOnlyThePinsTheApplicationTook) {
  const size_t bytes = 4u << 20, n = bytes / 4;
  CUdeviceptr act = allocate(bytes);
  std::uint32_t step = 0, layer = 0;
  void* params[] = {&act, const_cast<size_t*>(&n), &step, &layer};

  // While the launch naming the block is being enqueued it holds a pin of
  // its own, which no UNPIN may release.
  bool unpinned = true, spilled = true;
  ASSERT_EQ(CUDA_SUCCESS, engine_->launch(k_.write, nullptr, params, nullptr, [&] {
    unpinned = advise(act, TIERRT_ADVISE_UNPIN);
    spilled = advise(act, TIERRT_ADVISE_SPILL);
    return TIERRT_CU(cuLaunchKernel, k_.write, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
  }));
  EXPECT_FALSE(unpinned) << "an UNPIN released the launch's pin";
  EXPECT_FALSE(spilled) << "a block spilled while a launch naming it was enqueued";

  // The application's pins nest, and each UNPIN releases one of them.
  EXPECT_TRUE(advise(act, TIERRT_ADVISE_PIN));
  EXPECT_TRUE(advise(act, TIERRT_ADVISE_PIN));
  EXPECT_FALSE(advise(act, TIERRT_ADVISE_SPILL)) << "a pinned block spilled";
  EXPECT_TRUE(advise(act, TIERRT_ADVISE_UNPIN));
  EXPECT_FALSE(advise(act, TIERRT_ADVISE_SPILL)) << "one pin is left";
  EXPECT_TRUE(advise(act, TIERRT_ADVISE_UNPIN));
  EXPECT_FALSE(advise(act, TIERRT_ADVISE_UNPIN)) << "no pin of the application's is left";
  EXPECT_TRUE(spills_soon(act));
  EXPECT_EQ(CUDA_SUCCESS, free_tracked(act));
}

TEST_F(EngineUseCasesTest, FreeingAPinnedBlockEndsItsPins) {
  const size_t bytes = 4u << 20;
  CUdeviceptr a = allocate(bytes);
  ASSERT_TRUE(advise(a, TIERRT_ADVISE_PIN));
  ASSERT_EQ(CUDA_SUCCESS, free_tracked(a));
  EXPECT_FALSE(advise(a, TIERRT_ADVISE_UNPIN)) << "a freed block kept the application's pin";
  // The same size again reuses the freed block: it must not come back pinned.
  CUdeviceptr b = allocate(bytes);
  EXPECT_TRUE(spills_soon(b));
  EXPECT_EQ(CUDA_SUCCESS, free_tracked(b));
}

TEST_F(EngineUseCasesTest, PointerAttributesOfATrackedBlockAreTheBlocks) {
  const size_t bytes = 4u << 20;
  CUdeviceptr p = allocate(bytes);
  ASSERT_TRUE(spills_soon(p));  // its address may have nothing mapped now
  auto not_forwarded = [] { return CUDA_ERROR_NOT_FOUND; };
  CUdeviceptr start = 0;
  size_t size = 0;
  EXPECT_EQ(CUDA_SUCCESS,
            engine_->pointer_attribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 4096, not_forwarded));
  EXPECT_EQ(p, start);
  EXPECT_EQ(CUDA_SUCCESS, engine_->pointer_attribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 1, not_forwarded));
  EXPECT_EQ(bytes, size);
  // What tierrt does not model about the pointer is the driver's to answer.
  unsigned long long handle_types = 0;
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND,
            engine_->pointer_attribute(&handle_types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, p, not_forwarded));
  EXPECT_EQ(CUDA_SUCCESS, free_tracked(p));
}

TEST_F(EngineUseCasesTest, AGraphLaunchIsForwardedAndCounted) {
  const std::uint64_t before = engine_->launches();
  int forwarded = 0;
  EXPECT_EQ(CUDA_SUCCESS, engine_->graph_launch(nullptr, nullptr, [&] {
    ++forwarded;
    return CUDA_SUCCESS;
  }));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, engine_->graph_launch(nullptr, nullptr, [&] {
    ++forwarded;
    return CUDA_ERROR_INVALID_VALUE;
  }));
  EXPECT_EQ(2, forwarded);
  EXPECT_EQ(before + 1, engine_->launches()) << "only the launch that went out counts";
}

// Before any spill was asked for, nothing is being moved off the device, so
// a launch naming a block of any class shares its stream's use event (a job
// that fits pays no event per launch); the first spill still waits for that
// use, and from then on a launch naming a block not classified persistent
// records its own event. Its own process (*FirstSpill*): the engine is the
// process's, and any spill before it would end what it looks at.
TEST_F(EngineUseCasesTest, FirstSpillEndsLazyUsesOfUnclassifiedBlocksAndWaitsForThem) {
  ASSERT_FALSE(engine_->allocator_stats().spill_asked) << "run it in a process of its own (*FirstSpill*)";
  const size_t bytes = 4u << 20, n = bytes / 4;
  CUdeviceptr bad = allocate(4), a = allocate(bytes), b = allocate(bytes);
  std::uint32_t step = 7, layer = 0;
  auto launch = [&](CUfunction f, void** params) {
    return engine_->launch(f, nullptr, params, nullptr, [&] {
      return TIERRT_CU(cuLaunchKernel, f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
    });
  };
  ASSERT_EQ(CUDA_SUCCESS, engine_->access({{bad, 4}}, CU_STREAM_LEGACY,
                                          [&] { return TIERRT_CU(cuMemsetD32, bad, 0, 1); }));
  const alloc::Stats before = engine_->allocator_stats();
  void* write_a[] = {&a, const_cast<size_t*>(&n), &step, &layer};
  ASSERT_EQ(CUDA_SUCCESS, launch(k_.write, write_a));
  ASSERT_EQ(CUDA_SUCCESS, launch(k_.write, write_a));
  const alloc::Stats lazy = engine_->allocator_stats();
  EXPECT_EQ(before.lazy_uses + 2, lazy.lazy_uses) << "a launch recorded its own event before any spill was asked for";

  // The spill's copy waits for the lazy uses: the bytes come back whole.
  ASSERT_TRUE(spills_soon(a));
  EXPECT_TRUE(engine_->allocator_stats().spill_asked);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (engine_->allocator_stats().spills_done == before.spills_done && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(before.spills_done + 1, engine_->allocator_stats().spills_done) << "the spill did not complete";
  layer = 1;
  void* write_b[] = {&b, const_cast<size_t*>(&n), &step, &layer};
  const alloc::Stats asked = engine_->allocator_stats();
  ASSERT_EQ(CUDA_SUCCESS, launch(k_.write, write_b));
  const alloc::Stats eager = engine_->allocator_stats();
  EXPECT_EQ(asked.lazy_uses, eager.lazy_uses) << "once spills began, an unclassified block's use was lazy";
  EXPECT_EQ(asked.use_events + 1, eager.use_events);

  layer = 0;
  void* check_a[] = {&a, const_cast<size_t*>(&n), &step, &layer, &bad};
  ASSERT_EQ(CUDA_SUCCESS, launch(k_.check, check_a));
  layer = 1;
  void* check_b[] = {&b, const_cast<size_t*>(&n), &step, &layer, &bad};
  ASSERT_EQ(CUDA_SUCCESS, launch(k_.check, check_b));
  std::uint32_t wrong = 1;
  ASSERT_EQ(CUDA_SUCCESS, engine_->access({{bad, 4}}, CU_STREAM_LEGACY,
                                          [&] { return TIERRT_CU(cuMemcpyDtoH, &wrong, bad, 4); }));
  EXPECT_EQ(0u, wrong) << "a spill that followed lazy uses lost bytes";
  EXPECT_GE(engine_->allocator_stats().fetches, 1u) << "the spilled block was not fetched back";
  for (CUdeviceptr p : {a, b, bad}) EXPECT_EQ(CUDA_SUCCESS, free_tracked(p));
}

}  // namespace
}  // namespace tierrt
