// The device budget is a target, never a reason to fail: what cannot be
// spilled goes over it while the driver grants the memory, and only the
// driver's own out-of-memory fails an allocation or a launch. Before going
// over, the rescue waits for what other threads have in progress. Runs on a
// 64 MiB simdev device (SIMDEV_MEM=64MiB; the two threads' case on 8 MiB),
// in both spill modes.
#include <simdev/simdev.h>

#include <atomic>
#include <chrono>
#include <barrier>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/allocator/sim_support.h"

namespace tierrt::alloc::testing {
namespace {

constexpr std::size_t MiB = 1u << 20;

std::unique_ptr<Allocator> make(SpillMode m, Options o = {}) {
  Env::get().bind();
  o.mode = m;
  CUresult r = CUDA_SUCCESS;
  auto a = Allocator::create(o, &r);
  EXPECT_EQ(r, CUDA_SUCCESS);
  if (a) {
    EXPECT_EQ(a->mode(), m);
  }
  return a;
}

Block* alloc(Allocator& a, std::size_t n) {
  CUdeviceptr p = 0;
  EXPECT_EQ(a.allocate(&p, n, nullptr), CUDA_SUCCESS);
  return a.lookup(p);
}

std::size_t device_total() {
  std::size_t total = 0;
  EXPECT_EQ(cuDeviceTotalMem(&total, Env::get().dev), CUDA_SUCCESS);
  return total;
}

class Budget : public ::testing::TestWithParam<SpillMode> {};

// observe mode (a host budget of one byte: nothing spills) refuses nothing
// the driver grants: every 4 MiB allocation that fits the device succeeds,
// though the default budget keeps a reserve; the next one gets the
// driver's own out-of-memory.
TEST_P(Budget, ObserveNeverRefusesWhatTheDriverGrants) {
  Options o;
  o.host_budget = 1;
  auto a = make(GetParam(), o);
  const std::size_t total = device_total();
  ASSERT_LT(a->stats().device_budget, total);
  std::vector<CUdeviceptr> ps(total / (4 * MiB));
  for (std::size_t i = 0; i < ps.size(); ++i) ASSERT_EQ(a->allocate(&ps[i], 4 * MiB, nullptr), CUDA_SUCCESS) << i;
  CUdeviceptr more = 0;
  EXPECT_EQ(a->allocate(&more, 4 * MiB, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_GE(a->stats().over_budget, 1u);
  for (CUdeviceptr p : ps) CU_OK(a->free(p, nullptr));
}

// A launch that names more bytes than the budget, on a device with room
// for them: it goes ahead (copy mode too), the budget is passed and that
// is counted, and every byte is right.
TEST_P(Budget, ALaunchNamingMoreThanTheBudgetGoesAheadWhileTheDeviceHasRoom) {
  Options o;
  o.device_budget = 24 * MiB;
  auto a = make(GetParam(), o);
  Block* x = alloc(*a, 16 * MiB);
  CU_OK(fill(*a, x, nullptr, 1));
  Block* y = alloc(*a, 16 * MiB);  // spills x
  CU_OK(fill(*a, y, nullptr, 2));
  a->drain();
  Block* both[2] = {x, y};
  const Kernels& k = Env::get().k;
  CU_OK(use_blocks(*a, both, nullptr, [&] {
    CUresult r = launch3(k.fill, nullptr, x->va, x->size, 3);
    if (r == CUDA_SUCCESS) r = launch3(k.fill, nullptr, y->va, y->size, 4);
    return r;
  }));
  CU_OK(cuCtxSynchronize());
  const Stats st = a->stats();
  EXPECT_GE(st.over_budget, 1u);
  EXPECT_GT(st.device_peak, st.device_budget);
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, x, &got));
  EXPECT_TRUE(got == expected(16 * MiB, 3));
  CU_OK(read(*a, y, &got));
  EXPECT_TRUE(got == expected(16 * MiB, 4));
  for (Block* b : both) CU_OK(a->free(b->va, nullptr));
}

// Where the device itself is full, the driver decides: copy mode gives the
// launch the driver's out-of-memory at once; remap runs it over the link,
// the block staying on its host copy.
TEST_P(Budget, WhereTheDeviceIsFullCopyGetsTheDriversErrorAndRemapReadsOverTheLink) {
  auto a = make(GetParam());
  Block* y = alloc(*a, 30 * MiB);
  CU_OK(fill(*a, y, nullptr, 5));
  ASSERT_EQ(a->spill(y), SpillResult::Started);
  a->drain();
  a->trim();
  Block* x = alloc(*a, 40 * MiB);
  CU_OK(fill(*a, x, nullptr, 6));
  Block* launch[2] = {x, y};
  const auto t0 = std::chrono::steady_clock::now();
  const CUresult r = a->ensure_resident(launch, nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  if (GetParam() == SpillMode::Copy) {
    EXPECT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_EQ(x->pins.load(), 0u);
  } else {
    EXPECT_EQ(r, CUDA_SUCCESS);
    EXPECT_EQ(y->st(), State::Spilled);
    a->release(launch);
  }
  CU_OK(a->free(x->va, nullptr));
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, y, &got));
  EXPECT_TRUE(got == expected(30 * MiB, 5));
  CU_OK(a->free(y->va, nullptr));
}

// Two threads allocating near the budget (here the whole device, so that
// passing it is no way out): the second waits for the first's allocation in
// progress, then spills that block, and never gets out-of-memory.
TEST_P(Budget, TwoThreadsAllocatingNearTheBudgetWaitForEachOther) {
  Options o;
  o.device_budget = device_total();
  auto a = make(GetParam(), o);
  // Five eighths of the device each: two never fit at once. (Run on an 8
  // MiB device, so that TSan's checks of every byte copied stay short.)
  const std::size_t n = device_total() / 8 * 5;
  constexpr int kRounds = 8;
  std::barrier start(2);
  std::atomic<int> failures{0}, wrong{0};
  auto body = [&](int id) {
    Env::get().bind();
    CUstream s = nullptr;
    if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return ++failures, void();
    for (int round = 0; round < kRounds; ++round) {
      start.arrive_and_wait();  // both allocate at once
      CUdeviceptr p = 0;
      if (a->allocate(&p, n, s) != CUDA_SUCCESS) {
        ++failures;
        continue;
      }
      Block* b = a->lookup(p);
      const std::uint64_t seed = 100 * round + id;
      std::vector<std::uint8_t> got;
      if (fill(*a, b, s, seed) != CUDA_SUCCESS || read(*a, b, &got, s) != CUDA_SUCCESS) ++failures;
      else if (got != expected(n, seed)) ++wrong;
      if (a->free(p, s) != CUDA_SUCCESS) ++failures;
      if (cuStreamSynchronize(s) != CUDA_SUCCESS) ++failures;
    }
    cuStreamDestroy(s);
  };
  std::thread t1(body, 1), t2(body, 2);
  t1.join();
  t2.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
}

// A fetch in progress on another thread, holding its device memory, is
// something to wait for: here it is held (its copy enqueued, not yet
// published) until the rescue of an allocation that needs that memory has
// begun. The allocation then waits, spills the fetched block once the
// launch that needed it is done, and stays within the budget.
class HoldingObserver final : public MoveObserver {
 public:
  void demand_fetch(const Block&) noexcept override {
    std::unique_lock<std::mutex> l(mu_);
    if (held_) return;  // only the first
    held_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return released_; });
  }
  void late_fetch(const Block&, std::uint64_t) noexcept override {}
  void copy_done(Direction, std::uint64_t, std::uint64_t) noexcept override {}
  void wait_held() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return held_; });
  }
  void release() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, released_ = false;
};

TEST_P(Budget, RescueWaitsForAFetchInProgressOnAnotherThread) {
  Options o;
  o.device_budget = 32 * MiB;
  auto a = make(GetParam(), o);
  HoldingObserver observer;
  a->set_observer(&observer);
  Block* y = alloc(*a, 16 * MiB);
  CU_OK(fill(*a, y, nullptr, 7));
  ASSERT_EQ(a->spill(y), SpillResult::Started);
  a->drain();
  a->trim();
  std::vector<std::uint8_t> got_y;
  CUresult read_y = CUDA_ERROR_UNKNOWN;
  std::thread launch([&] {
    Env::get().bind();
    read_y = read(*a, y, &got_y);  // a demand fetch, held by the observer
  });
  observer.wait_held();
  const std::uint64_t rescues = a->stats().rescues;
  std::atomic<bool> returned{false};
  std::thread releaser([&] {
    // Once the allocation's rescue has begun (or it returned without one):
    // a handshake, not a delay.
    while (a->stats().rescues == rescues && !returned.load()) std::this_thread::yield();
    observer.release();
  });
  CUdeviceptr p = 0;
  const CUresult r = a->allocate(&p, 24 * MiB, nullptr);
  returned = true;
  releaser.join();
  launch.join();
  a->set_observer(nullptr);
  EXPECT_EQ(r, CUDA_SUCCESS);
  CU_OK(read_y);
  EXPECT_TRUE(got_y == expected(16 * MiB, 7));
  const Stats st = a->stats();
  EXPECT_EQ(st.over_budget, 0u) << "it passed the budget instead of waiting for the fetch";
  EXPECT_LE(st.device_peak, st.device_budget);
  a->drain();
  // One of the two made room for the other: y for the allocation, or, when
  // the reader's fetch of y came after the rescue had spilled it again, the
  // idle new block for y. Either way both never held the device together.
  Block* pb = a->lookup(p);
  ASSERT_NE(pb, nullptr);
  EXPECT_TRUE((y->st() == State::Spilled) != (pb->st() == State::Spilled))
      << "y " << state_name(y->st()) << ", the new block " << state_name(pb->st());
  EXPECT_LE(a->stats().device_used, a->stats().device_budget);
  if (r == CUDA_SUCCESS) CU_OK(a->free(p, nullptr));
  CU_OK(read(*a, y, &got_y));
  EXPECT_TRUE(got_y == expected(16 * MiB, 7));
  CU_OK(a->free(y->va, nullptr));
}

// The only block that could make room cannot move now (a stream that used
// it is capturing, so its spill is given up): the allocation goes over the
// budget at once. A given-up spill frees nothing, so it must not count as
// the change a waiting rescue looks for, or the rescue tries it forever.
TEST_P(Budget, ASpillGivenUpIsNoReasonToTryAgain) {
  Options o;
  o.device_budget = 8 * MiB;
  auto a = make(GetParam(), o);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  Block* x = alloc(*a, 6 * MiB);
  ASSERT_NE(x, nullptr);
  ASSERT_EQ(fill(*a, x, s, 51), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  std::atomic<bool> done{false};
  CUdeviceptr y = 0;
  std::thread t([&] {
    Env::get().bind();
    EXPECT_EQ(a->allocate(&y, 6 * MiB, nullptr), CUDA_SUCCESS);
    done = true;
  });
  for (int ms = 0; ms < 5000 && !done.load(); ++ms) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool finished = done.load();
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);  // lets a spinning rescue through
  t.join();
  EXPECT_TRUE(finished) << "the allocation kept retrying the spill it could not make";
  EXPECT_EQ(x->st(), State::Resident);
  EXPECT_EQ(a->free(y, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(a->free(x->va, nullptr), CUDA_SUCCESS);
  if (g != nullptr) {
    EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  }
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

INSTANTIATE_TEST_SUITE_P(Allocator, Budget, ::testing::Values(SpillMode::Remap, SpillMode::Copy),
                         [](const ::testing::TestParamInfo<SpillMode>& i) {
                           return std::string(i.param == SpillMode::Remap ? "remap" : "copy");
                         });

}  // namespace
}  // namespace tierrt::alloc::testing
