// A fetch with the budget full takes a freed block's chunk in stream order
// (ChunkDonors, allocator/chunk_handover.cpp): the host does not wait for the
// freed block's last uses, the copy does, on the device; the freed block's
// last reader still reads its own bytes; a fetch that fails gives the chunk
// back. Run in every spill mode, with uses recorded eagerly and lazily.
#include <simdev/simdev.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/allocator/sim_support.h"

namespace tierrt::alloc::testing {
namespace {

constexpr std::size_t MiB = 1u << 20;
constexpr std::size_t kBytes = 8 * MiB;

class Handover : public ModeSuite {
 protected:
  // Budget for two blocks; spares up to a quarter of it hold no 8 MiB chunk,
  // so a spill leaves none behind for the fetch.
  void SetUp() override {
    ModeSuite::SetUp();
    Env::get().bind();
    Options o;
    o.mode = GetParam();
    o.pinned_chunk = 8 * MiB;
    o.device_budget = 2 * kBytes;
    apply_lazy_uses(&o);
    CUresult r = CUDA_SUCCESS;
    a_ = Allocator::create(o, &r);
    ASSERT_EQ(r, CUDA_SUCCESS);
    CU_OK(cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING));
    CU_OK(cuMemAlloc(&out_, 8));
    // spilled: on the host; freed: cached, its last reader held at the late
    // gate; other: resident. The budget is full.
    spilled_ = alloc(1);
    a_->drain();
    ASSERT_EQ(a_->spill(spilled_), SpillResult::Started);
    a_->drain();
    ASSERT_EQ(spilled_->st(), State::Spilled);
    freed_ = alloc(2);
    other_ = alloc(3);
    CU_OK(cuStreamSynchronize(nullptr));  // the fills, before s reads
    late_gate() = false;
    Block* named[1] = {freed_};
    CU_OK(use_blocks(*a_, named, s_,
                     [&] { return launch3(Env::get().k.sum_late, s_, freed_->va, kBytes, out_); }));
    freed_va_ = freed_->va;
    CU_OK(a_->free(freed_va_, s_));
    const Stats st = a_->stats();
    ASSERT_EQ(st.cached_bytes, kBytes);
    ASSERT_EQ(st.device_used, 2 * kBytes) << "the budget is full";
    ASSERT_EQ(st.spare_device_bytes, 0u);
  }
  void TearDown() override {
    late_gate() = true;
    if (s_ != nullptr) (void)cuStreamSynchronize(s_);
    a_.reset();
    if (s_ != nullptr) (void)cuStreamDestroy(s_);
    if (out_ != 0) (void)cuMemFree(out_);
    ModeSuite::TearDown();
  }
  Block* alloc(std::uint64_t seed) {
    CUdeviceptr p = 0;
    EXPECT_EQ(a_->allocate(&p, kBytes, nullptr), CUDA_SUCCESS);
    Block* b = a_->lookup(p);
    EXPECT_NE(b, nullptr);
    if (b != nullptr) {
      EXPECT_EQ(fill(*a_, b, nullptr, seed), CUDA_SUCCESS);
    }
    return b;
  }
  // A prefetch of `spilled_` on another thread; true when it returned
  // within `ms` while the freed block's reader is still held.
  bool prefetch_returns_within(int ms, CUresult* r) {
    std::atomic<bool> done{false};
    std::thread t([&] {
      Env::get().bind();
      *r = a_->prefetch(spilled_, nullptr);
      done = true;
    });
    for (int i = 0; i < ms && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const bool returned = done.load();
    late_gate() = true;  // a host wait (the rescue's) ends now
    t.join();
    return returned;
  }
  std::uint64_t reader_result() {
    EXPECT_EQ(cuStreamSynchronize(s_), CUDA_SUCCESS);
    std::uint64_t h = 0;
    EXPECT_EQ(cuMemcpyDtoH(&h, out_, 8), CUDA_SUCCESS);
    return h;
  }
  static std::uint64_t checksum_of(std::uint64_t seed) {
    const std::vector<std::uint8_t> want = expected(kBytes, seed);
    return checksum(want.data(), want.size());
  }

  std::unique_ptr<Allocator> a_;
  CUstream s_ = nullptr;
  CUdeviceptr out_ = 0;
  Block *spilled_ = nullptr, *freed_ = nullptr, *other_ = nullptr;
  CUdeviceptr freed_va_ = 0;
};

TEST_P(Handover, AFetchTakesAFreedBlocksChunkWithoutTheHostWaitingForItsUses) {
  CUresult r = CUDA_ERROR_UNKNOWN;
  EXPECT_TRUE(prefetch_returns_within(2000, &r)) << "the host waited for the freed block's reader";
  ASSERT_EQ(r, CUDA_SUCCESS);
  Stats st = a_->stats();
  EXPECT_EQ(st.chunks_handed_over, 1u);
  EXPECT_EQ(st.device_used, 2 * kBytes) << "the chunk changed hands within the budget";
  EXPECT_EQ(st.over_budget, 0u);
  EXPECT_EQ(st.cached_bytes, 0u);
  EXPECT_EQ(st.trimmed_bytes, 0u) << "no rescue";
  EXPECT_EQ(reader_result(), checksum_of(2)) << "the fetch's copy wrote the chunk before its last reader was done";
  std::vector<std::uint8_t> got;
  CU_OK(read(*a_, spilled_, &got));
  EXPECT_EQ(got, expected(kBytes, 1));
  a_->drain();
  EXPECT_EQ(a_->lookup(freed_va_), nullptr) << "the donor's VA goes once the copy completed";
  st = a_->stats();
  EXPECT_EQ(st.device_used, 2 * kBytes);
  CU_OK(read(*a_, other_, &got));
  EXPECT_EQ(got, expected(kBytes, 3));
  CU_OK(a_->free(spilled_->va, nullptr));
  CU_OK(a_->free(other_->va, nullptr));
}

// The map of the chunk at the fetched block's VA fails: the chunk, mapped
// nowhere else, goes back to its donor, the donor to the cache, and the
// block stays on the host with its bytes; the next fetch takes it again.
TEST_P(Handover, AFetchThatFailsGivesTheChunkBackToItsDonor) {
  ASSERT_EQ(simdev_inject_fault("cuMemMap", 1, 0), 0);
  CUresult r = CUDA_SUCCESS;
  EXPECT_TRUE(prefetch_returns_within(2000, &r));
  simdev_clear_faults();
  EXPECT_NE(r, CUDA_SUCCESS);
  EXPECT_EQ(spilled_->st(), State::Spilled);
  Stats st = a_->stats();
  EXPECT_EQ(st.cached_bytes, kBytes) << "the donor is cached again";
  EXPECT_EQ(st.device_used, 2 * kBytes);
  EXPECT_EQ(reader_result(), checksum_of(2));
  std::vector<std::uint8_t> got;
  CU_OK(read(*a_, spilled_, &got));  // a demand fetch, given the same chunk
  EXPECT_EQ(got, expected(kBytes, 1));
  a_->drain();
  st = a_->stats();
  EXPECT_EQ(st.chunks_handed_over, 2u);
  EXPECT_EQ(st.cached_bytes, 0u);
  EXPECT_EQ(st.device_used, 2 * kBytes);
  EXPECT_EQ(a_->lookup(freed_va_), nullptr);
  CU_OK(a_->free(spilled_->va, nullptr));
  CU_OK(a_->free(other_->va, nullptr));
}

INSTANTIATE_TEST_SUITE_P(EveryMode, Handover, every_mode_param(), mode_param_name);

}  // namespace
}  // namespace tierrt::alloc::testing
