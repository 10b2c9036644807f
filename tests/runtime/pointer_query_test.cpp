// Pointer queries about tiered memory answer what the driver answers for an
// untiered allocation of the same size, whatever the block's state, in the
// spill mode TIERRT_SPILL_MODE names (the suite runs in both).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "runtime/engine.h"
#include "tests/runtime/simdev_kernels.h"

namespace tierrt {
namespace {

using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

class PointerQueryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(testing_simdev::set_up(&k_));
    engine_ = Engine::start();
    ASSERT_NE(nullptr, engine_) << "the engine did not start";
    driver_range_ = reinterpret_cast<AddressRangeFn>(drv::resolve("cuMemGetAddressRange_v2"));
    ASSERT_NE(nullptr, driver_range_);
  }

  CUdeviceptr allocate(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(CUDA_SUCCESS, engine_->allocate(&p, bytes, nullptr));
    return p;
  }
  CUresult free_tracked(CUdeviceptr p) {
    return engine_->free_async(p, nullptr, [] { return CUDA_ERROR_NOT_FOUND; });
  }
  // Spilled for good: the copy landed and the device memory was released.
  bool spilled(CUdeviceptr p) {
    const std::uint64_t before = engine_->allocator_stats().blocks[static_cast<int>(alloc::State::Spilled)];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!engine_->advise(p, TIERRT_ADVISE_SPILL)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    while (engine_->allocator_stats().blocks[static_cast<int>(alloc::State::Spilled)] == before) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  // cuPointerGetAttribute through the engine, the driver's own answer behind it.
  CUresult tiered(CUpointer_attribute a, CUdeviceptr p, void* data) {
    return engine_->pointer_attribute(data, a, p, [&] { return TIERRT_CU(cuPointerGetAttribute, data, a, p); });
  }
  CUresult tiered_range(CUdeviceptr p, CUdeviceptr* base, size_t* size) {
    return engine_->address_range(base, size, p, [&] { return driver_range_(base, size, p); });
  }

  // Every attribute that does not name the address itself is the untiered
  // allocation's; the range is the allocation's own.
  void expect_same_answers(CUdeviceptr t, CUdeviceptr u, size_t bytes, const char* state) {
    SCOPED_TRACE(state);
    for (CUpointer_attribute a :
         {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS,
          CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_MAPPED,
          CU_POINTER_ATTRIBUTE_RANGE_SIZE}) {
      std::uint64_t want = 0, got = 0;
      ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuPointerGetAttribute, &want, a, u + 4096)) << "attribute " << a;
      EXPECT_EQ(CUDA_SUCCESS, tiered(a, t + 4096, &got)) << "attribute " << a;
      EXPECT_EQ(want, got) << "attribute " << a;
    }
    // NVIDIA's driver leaves SYNC_MEMOPS unset for a cuMemAlloc allocation
    // (simdev sets it): tierrt answers as the driver does.
    unsigned sync_memops = 1;
    EXPECT_EQ(CUDA_SUCCESS, tiered(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, t + 4096, &sync_memops));
    EXPECT_EQ(0u, sync_memops);
    CUdeviceptr mapping = 0;
    size_t mapped = 0;
    EXPECT_EQ(CUDA_SUCCESS, tiered(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, t + 4096, &mapping));
    EXPECT_EQ(t, mapping);
    EXPECT_EQ(CUDA_SUCCESS, tiered(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, t + 4096, &mapped));
    EXPECT_GE(mapped, bytes);
    CUdeviceptr start = 0, dev = 0;
    EXPECT_EQ(CUDA_SUCCESS, tiered(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, t + 4096, &start));
    EXPECT_EQ(t, start);
    EXPECT_EQ(CUDA_SUCCESS, tiered(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, t + 4096, &dev));
    EXPECT_EQ(t + 4096, dev);
    void* host = nullptr;
    EXPECT_EQ(TIERRT_CU(cuPointerGetAttribute, &host, CU_POINTER_ATTRIBUTE_HOST_POINTER, u),
              tiered(CU_POINTER_ATTRIBUTE_HOST_POINTER, t, &host));

    CUdeviceptr want_base = 0, base = 0;
    size_t want_size = 0, size = 0;
    ASSERT_EQ(CUDA_SUCCESS, driver_range_(&want_base, &want_size, u + 100));
    EXPECT_EQ(CUDA_SUCCESS, tiered_range(t + 100, &base, &size));
    EXPECT_EQ(t, base);
    EXPECT_EQ(want_size, size);
    EXPECT_EQ(bytes, size);

    // cuPointerGetAttributes gives the same answers in one call.
    CUcontext want_ctx = nullptr, ctx = nullptr;
    size_t range = 0;
    unsigned long long id = 0;
    ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuPointerGetAttribute, &want_ctx, CU_POINTER_ATTRIBUTE_CONTEXT, u));
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                   CU_POINTER_ATTRIBUTE_BUFFER_ID};
    void* data[] = {&ctx, &range, &id};
    EXPECT_EQ(CUDA_SUCCESS, engine_->pointer_attributes(3, attrs, data, t, [&] {
      return TIERRT_CU(cuPointerGetAttributes, 3u, attrs, data, t);
    }));
    EXPECT_EQ(want_ctx, ctx);
    EXPECT_EQ(bytes, range);
    EXPECT_NE(0u, id);
  }

  testing_simdev::Kernels k_;
  Engine* engine_ = nullptr;
  AddressRangeFn driver_range_ = nullptr;
};

TEST_F(PointerQueryTest, ABlockAnswersAsAnUntieredAllocationInEveryState) {
  // Not a multiple of the granularity: the block maps more than it reports.
  const size_t bytes = (3u << 20) + 4096;
  CUdeviceptr u = 0;
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuMemAlloc, &u, bytes));
  CUdeviceptr t = allocate(bytes);
  ASSERT_NE(0u, t);

  expect_same_answers(t, u, bytes, "resident");
  ASSERT_TRUE(spilled(t));
  expect_same_answers(t, u, bytes, "spilled");
  ASSERT_TRUE(engine_->advise(t, TIERRT_ADVISE_PREFETCH));
  expect_same_answers(t, u, bytes, "fetching or fetched");

  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
  EXPECT_EQ(CUDA_SUCCESS, free_tracked(t));
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuMemFree, u));
}

TEST_F(PointerQueryTest, FreedMemoryIsUnknownAsTheDriverSaysOfIt) {
  const size_t bytes = 4u << 20;
  CUdeviceptr u = 0;
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuMemAlloc, &u, bytes));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuMemFree, u));
  CUdeviceptr t = allocate(bytes);
  ASSERT_EQ(CUDA_SUCCESS, free_tracked(t));  // kept in tierrt's cache, still mapped

  CUcontext ctx = nullptr;
  EXPECT_EQ(TIERRT_CU(cuPointerGetAttribute, &ctx, CU_POINTER_ATTRIBUTE_CONTEXT, u),
            tiered(CU_POINTER_ATTRIBUTE_CONTEXT, t, &ctx));
  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_EQ(driver_range_(&base, &size, u), tiered_range(t, &base, &size));
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND, tiered_range(t, &base, &size));
}

TEST_F(PointerQueryTest, EachAllocationHasItsOwnBufferIdEvenAtTheSameAddress) {
  const size_t bytes = 4u << 20;
  auto id_of = [&](CUdeviceptr p) {
    unsigned long long id = 0;
    EXPECT_EQ(CUDA_SUCCESS, tiered(CU_POINTER_ATTRIBUTE_BUFFER_ID, p, &id));
    return id;
  };
  CUdeviceptr a = allocate(bytes);
  const unsigned long long first = id_of(a);
  EXPECT_EQ(first, id_of(a + bytes - 1)) << "one allocation, one id";
  ASSERT_EQ(CUDA_SUCCESS, free_tracked(a));
  CUdeviceptr b = allocate(bytes);
  ASSERT_EQ(a, b) << "the freed block is handed out again at its address";
  EXPECT_NE(first, id_of(b));
  EXPECT_EQ(CUDA_SUCCESS, free_tracked(b));
}

TEST_F(PointerQueryTest, ASlabSlotReportsItsOwnRangeAndId) {
  const size_t bytes = 4096;
  CUdeviceptr x = allocate(bytes), y = allocate(bytes);
  ASSERT_NE(0u, x);
  ASSERT_NE(0u, y);
  for (CUdeviceptr p : {x, y}) {
    CUdeviceptr start = 0, base = 0;
    size_t size = 0, range = 0;
    EXPECT_EQ(CUDA_SUCCESS, tiered(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 100, &start));
    EXPECT_EQ(p, start);
    EXPECT_EQ(CUDA_SUCCESS, tiered(CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 100, &range));
    EXPECT_EQ(bytes, range);
    EXPECT_EQ(CUDA_SUCCESS, tiered_range(p + 100, &base, &size));
    EXPECT_EQ(p, base);
    EXPECT_EQ(bytes, size);
  }
  unsigned long long ix = 0, iy = 0;
  EXPECT_EQ(CUDA_SUCCESS, tiered(CU_POINTER_ATTRIBUTE_BUFFER_ID, x, &ix));
  EXPECT_EQ(CUDA_SUCCESS, tiered(CU_POINTER_ATTRIBUTE_BUFFER_ID, y, &iy));
  EXPECT_NE(ix, iy) << "two allocations in one slab share a buffer id";
  EXPECT_EQ(CUDA_SUCCESS, free_tracked(x));
  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_EQ(CUDA_ERROR_NOT_FOUND, tiered_range(x, &base, &size)) << "a freed slot is no allocation";
  EXPECT_EQ(CUDA_SUCCESS, free_tracked(y));
}

}  // namespace
}  // namespace tierrt
