// A move that fails at any step leaves the block where its bytes are: a
// failed fetch leaves a spilled block on its host copy (remap: the launch
// goes ahead, reading over the link) or gives the launch the driver's error
// (copy: nothing is mapped at its VA), never success with wrong bytes; a
// failed spill leaves it resident and intact. Each driver call on the two
// paths is made to fail in turn (simdev fault injection), and a kernel that
// reads and writes every byte checks the result.
#include <simdev/simdev.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <tuple>

#include "allocator/use_tracker.h"
#include "tests/allocator/sim_support.h"

namespace tierrt::alloc::testing {
namespace {

constexpr std::size_t MiB = 1u << 20;
constexpr std::size_t kBytes = 4 * MiB;

// dst ^= mask, a word at a time (byte loops take minutes under TSan).
void xor_into(std::uint8_t* dst, const std::uint8_t* mask, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t d, m;
    std::memcpy(&d, dst + i, 8);
    std::memcpy(&m, mask + i, 8);
    d ^= m;
    std::memcpy(dst + i, &d, 8);
  }
  for (; i < n; ++i) dst[i] ^= mask[i];
}

// (ptr, n, seed): every byte XORed with pattern(seed), so that the result
// depends on what the kernel read as much as on what it wrote.
void k_xor(const simdev_launch* l) {
  CUdeviceptr p;
  std::uint64_t n, seed;
  std::memcpy(&p, l->params[0], 8);
  std::memcpy(&n, l->params[1], 8);
  std::memcpy(&seed, l->params[2], 8);
  std::vector<std::uint8_t> mask(n);
  pattern(mask.data(), n, seed);
  xor_into(reinterpret_cast<std::uint8_t*>(p), mask.data(), n);
}

CUfunction xor_kernel() {
  static const CUfunction f = [] {
    Env::get().bind();
    static const std::size_t sizes[3] = {8, 8, 8};
    simdev_kernel_desc d{};
    d.name = "tierrt_xor";
    d.fn = k_xor;
    d.num_params = 3;
    d.param_sizes = sizes;
    simdev_register_kernel(&d);
    static const char image[] = "simdev host kernels";
    CUmodule m = nullptr;
    CUfunction fn = nullptr;
    if (cuModuleLoadData(&m, image) == CUDA_SUCCESS) cuModuleGetFunction(&fn, m, "tierrt_xor");
    return fn;
  }();
  return f;
}

// What the runtime does for a launch of the XOR kernel on `b`.
CUresult launch_xor(Allocator& a, Block* b, std::uint64_t seed) {
  Block* bs[1] = {b};
  return use_blocks(a, bs, nullptr, [&] { return launch3(xor_kernel(), nullptr, b->va, b->size, seed); });
}

std::vector<std::uint8_t> xored(std::uint64_t seed, std::uint64_t mask_seed) {
  std::vector<std::uint8_t> v = expected(kBytes, seed), m = expected(kBytes, mask_seed);
  xor_into(v.data(), m.data(), v.size());
  return v;
}

std::unique_ptr<Allocator> make(SpillMode m) {
  Env::get().bind();
  Options o;
  o.mode = m;
  o.pinned_chunk = 8 * MiB;
  CUresult r = CUDA_SUCCESS;
  auto a = Allocator::create(o, &r);
  EXPECT_EQ(r, CUDA_SUCCESS);
  if (a) {
    EXPECT_EQ(a->mode(), m);
  }
  return a;
}

Block* alloc(Allocator& a) {
  CUdeviceptr p = 0;
  EXPECT_EQ(a.allocate(&p, kBytes, nullptr), CUDA_SUCCESS);
  return a.lookup(p);
}

// The driver calls of a fetch and of a spill, in either mode (a name the
// mode never calls makes the case a plain one). The nth call of each is
// made to fail, for n up to kMaxNth: later calls of the same function on
// the same path (the second map of a remap, the timing events) fail too.
const char* const kFetchCalls[] = {"cuMemCreate", "cuMemUnmap", "cuMemMap", "cuMemSetAccess", "cuMemcpyAsync",
                                   "cuMemcpyHtoDAsync_v2", "cuEventRecord", "cuEventSynchronize",
                                   "cuStreamSynchronize"};
const char* const kSpillCalls[] = {"cuStreamIsCapturing", "cuMemAddressReserve", "cuMemCreate", "cuMemMap",
                                   "cuMemSetAccess", "cuStreamWaitEvent", "cuEventRecord", "cuMemcpyAsync",
                                   "cuMemcpyDtoHAsync_v2", "cuEventSynchronize", "cuStreamSynchronize",
                                   "cuMemUnmap", "cuMemHostAlloc", "cuEventQuery"};
constexpr unsigned kMaxNth = 3;

using Case = std::tuple<SpillMode, bool>;  // mode; whether a spare chunk is at hand for the fetch
class FetchFailure : public ::testing::TestWithParam<Case> {};
class SpillFailure : public ::testing::TestWithParam<SpillMode> {};
class FetchCounts : public ::testing::TestWithParam<SpillMode> {};
class RandomFaults : public ::testing::TestWithParam<SpillMode> {};

std::string mode_name(SpillMode m) { return m == SpillMode::Remap ? "remap" : "copy"; }

TEST_P(FetchFailure, LeavesTheBlockWhereItsBytesAreAndNeverRunsALaunchOnWrongBytes) {
  const auto [mode, spare] = GetParam();
  const unsigned long long device_before = simdev_device_bytes_in_use();
  for (const char* call : kFetchCalls) {
    for (unsigned nth = 1; nth <= kMaxNth; ++nth) {
      SCOPED_TRACE(std::string(call) + ":" + std::to_string(nth));
      auto a = make(mode);
      ASSERT_NE(a, nullptr);
      Block* b = alloc(*a);
      Block* other = alloc(*a);
      CU_OK(fill(*a, b, nullptr, 1));
      CU_OK(fill(*a, other, nullptr, 2));
      ASSERT_EQ(a->spill(b), SpillResult::Started);
      a->drain();
      ASSERT_EQ(b->st(), State::Spilled);
      if (!spare) a->trim();
      ASSERT_EQ(simdev_inject_fault(call, nth, 0), 0);
      const CUresult r = launch_xor(*a, b, 3);  // a demand fetch
      const CUresult synced = cuCtxSynchronize();
      a->drain();
      simdev_clear_faults();
      ASSERT_EQ(synced, CUDA_SUCCESS) << "the launch touched unmapped memory";
      const Stats st = a->stats();
      if (mode == SpillMode::Remap) {
        EXPECT_EQ(r, CUDA_SUCCESS) << "remap: the launch reads over the link";
      }
      if (r != CUDA_SUCCESS) {
        EXPECT_EQ(b->st(), State::Spilled);
      }
      EXPECT_LE(st.demand_fetches, st.fetches);
      // Other blocks move and reuse the chunks the failed fetch had (an
      // injected out-of-memory may have spilled `other` already).
      const SpillResult so = a->spill(other);
      ASSERT_TRUE(so == SpillResult::Started || so == SpillResult::AlreadyMoving);
      a->drain();
      Block* third = alloc(*a);
      CU_OK(fill(*a, third, nullptr, 4));
      std::vector<std::uint8_t> want = r == CUDA_SUCCESS ? xored(1, 3) : expected(kBytes, 1), got;
      CU_OK(read(*a, b, &got));
      EXPECT_TRUE(got == want) << "the launch " << (r == CUDA_SUCCESS ? "succeeded" : "failed")
                               << " yet the block holds other bytes";
      CU_OK(read(*a, other, &got));
      EXPECT_TRUE(got == expected(kBytes, 2)) << "another block's bytes changed";
      CU_OK(read(*a, third, &got));
      EXPECT_TRUE(got == expected(kBytes, 4));
      // The block works as before.
      CU_OK(launch_xor(*a, b, 5));
      const std::vector<std::uint8_t> mask = expected(kBytes, 5);
      for (std::size_t i = 0; i < want.size(); ++i) want[i] ^= mask[i];
      CU_OK(read(*a, b, &got));
      EXPECT_TRUE(got == want);
      for (Block* x : {b, other, third}) CU_OK(a->free(x->va, nullptr));
      a.reset();
      EXPECT_EQ(simdev_device_bytes_in_use(), device_before) << "device memory left behind";
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST_P(SpillFailure, LeavesTheBlockResidentAndIntact) {
  const SpillMode mode = GetParam();
  const unsigned long long device_before = simdev_device_bytes_in_use();
  for (const char* call : kSpillCalls) {
    for (unsigned nth = 1; nth <= kMaxNth; ++nth) {
      SCOPED_TRACE(std::string(call) + ":" + std::to_string(nth));
      auto a = make(mode);
      ASSERT_NE(a, nullptr);
      Block* b = alloc(*a);
      CU_OK(fill(*a, b, nullptr, 1));
      ASSERT_EQ(simdev_inject_fault(call, nth, 0), 0);
      const SpillResult sr = a->spill(b);
      a->drain();
      simdev_clear_faults();
      CU_OK(cuCtxSynchronize());
      const State st = b->st();
      // Resident when the spill failed; spilled (every byte on the host)
      // when it got as far as that.
      EXPECT_TRUE(st == State::Resident || st == State::Spilled) << state_name(st);
      if (sr != SpillResult::Started) {
        EXPECT_EQ(st, State::Resident);
      }
      CU_OK(launch_xor(*a, b, 3));
      std::vector<std::uint8_t> got;
      CU_OK(read(*a, b, &got));
      EXPECT_TRUE(got == xored(1, 3)) << "the block's bytes changed";
      // It can still be spilled and fetched.
      a->drain();
      EXPECT_EQ(a->spill(b), SpillResult::Started);
      a->drain();
      CU_OK(read(*a, b, &got));
      EXPECT_TRUE(got == xored(1, 3));
      CU_OK(a->free(b->va, nullptr));
      a.reset();
      EXPECT_EQ(simdev_device_bytes_in_use(), device_before) << "device memory left behind";
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// A fetch whose completion event could not be recorded, on a slow link (the
// copy still runs when the fetch gives up), while the wait for its stream
// fails too: the block's VA must not be unmapped (copy mode) or remapped to
// its host copy (remap mode) under the copy still writing it. Found by the
// random truth program with faults (the copy wrote unmapped memory, and a
// later call got the sticky CUDA_ERROR_ILLEGAL_ADDRESS).
TEST_P(FetchFailure, AFetchWhoseCopyEndIsUnknownNeverUnmapsUnderIt) {
  const auto [mode, spare] = GetParam();
  for (unsigned nth = 1; nth <= kMaxNth; ++nth) {
    SCOPED_TRACE("cuEventRecord:" + std::to_string(nth) + " and cuStreamSynchronize:1");
    auto a = make(mode);
    ASSERT_NE(a, nullptr);
    Block* b = alloc(*a);
    CU_OK(fill(*a, b, nullptr, 1));
    ASSERT_EQ(a->spill(b), SpillResult::Started);
    a->drain();
    ASSERT_EQ(b->st(), State::Spilled);
    if (!spare) a->trim();
    ASSERT_EQ(simdev_inject_fault("cuEventRecord", nth, 0), 0);
    ASSERT_EQ(simdev_inject_fault("cuStreamSynchronize", 1, 0), 0);
    const CUresult r = launch_xor(*a, b, 3);  // a demand fetch
    const CUresult synced = cuCtxSynchronize();
    a->drain();
    simdev_clear_faults();
    ASSERT_EQ(synced, CUDA_SUCCESS) << "a fetch's copy or the launch touched unmapped memory";
    std::vector<std::uint8_t> want = r == CUDA_SUCCESS ? xored(1, 3) : expected(kBytes, 1), got;
    CU_OK(read(*a, b, &got));
    EXPECT_TRUE(got == want) << "the launch " << (r == CUDA_SUCCESS ? "succeeded" : "failed")
                             << " yet the block holds other bytes";
    CU_OK(launch_xor(*a, b, 5));
    CU_OK(cuCtxSynchronize());
    CU_OK(a->free(b->va, nullptr));
    a.reset();
    if (::testing::Test::HasFailure()) return;
  }
}

// A demand fetch that failed is counted as started and failed, never as
// done: demand fetches stay among the fetches done, so the report's
// prefetches (done less demand) cannot underflow.
TEST_P(FetchCounts, AFailedDemandFetchIsCountedAsFailedNotAsDone) {
  auto a = make(GetParam());
  ASSERT_NE(a, nullptr);
  Block* b = alloc(*a);
  CU_OK(fill(*a, b, nullptr, 1));
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  ASSERT_EQ(simdev_inject_fault("cuMemMap", 1, 0), 0);
  const CUresult r = launch_xor(*a, b, 3);
  simdev_clear_faults();
  CU_OK(cuCtxSynchronize());
  EXPECT_EQ(r == CUDA_SUCCESS, GetParam() == SpillMode::Remap);
  const Stats st = a->stats();
  EXPECT_EQ(st.fetches_started, 1u);
  EXPECT_EQ(st.demand_fetches_started, 1u);
  EXPECT_EQ(st.fetches_failed, 1u);
  EXPECT_EQ(st.fetches, 0u);
  EXPECT_EQ(st.demand_fetches, 0u);
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, b, &got));
  EXPECT_TRUE(got == (r == CUDA_SUCCESS ? xored(1, 3) : expected(kBytes, 1)));
  const Stats after = a->stats();
  EXPECT_EQ(after.fetches, 1u);
  EXPECT_EQ(after.demand_fetches, 1u);
  EXPECT_LE(after.demand_fetches, after.fetches);
  CU_OK(a->free(b->va, nullptr));
}

// A prefetch may not spill others to make room: with the budget full it is
// put off (counted apart: no failure), the block stays on the host with its
// bytes, and a later prefetch, once there is room, brings it back.
TEST_P(FetchCounts, APrefetchWithNoRoomIsPutOffNotFailed) {
  Env::get().bind();
  Options o;
  o.mode = GetParam();
  o.pinned_chunk = 8 * MiB;
  o.device_budget = 2 * kBytes;
  CUresult made = CUDA_SUCCESS;
  auto a = Allocator::create(o, &made);
  ASSERT_EQ(made, CUDA_SUCCESS);
  Block* b = alloc(*a);
  CU_OK(fill(*a, b, nullptr, 1));
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  Block* full[] = {alloc(*a), alloc(*a)};  // the budget, whole
  ASSERT_EQ(b->st(), State::Spilled);
  EXPECT_EQ(a->prefetch(b, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  Stats st = a->stats();
  EXPECT_EQ(st.fetches_put_off, 1u);
  EXPECT_EQ(st.fetches_failed, 0u);
  EXPECT_EQ(b->st(), State::Spilled);
  CU_OK(a->free(full[0]->va, nullptr));
  CU_OK(a->prefetch(b, nullptr));
  a->drain();
  st = a->stats();
  EXPECT_EQ(st.fetches, 1u);
  EXPECT_EQ(st.demand_fetches, 0u);
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, b, &got));
  EXPECT_TRUE(got == expected(kBytes, 1));
  CU_OK(a->free(full[1]->va, nullptr));
  CU_OK(a->free(b->va, nullptr));
}

// Spills, prefetches, launches and reallocations in a random order (fixed
// seed), a fault armed at a random call of the two paths before each of
// them: whatever failed, every block ends with exactly the bytes the launches
// that went ahead gave it.
TEST_P(RandomFaults, DuringMovesNeverChangeAByte) {
  auto a = make(GetParam());
  ASSERT_NE(a, nullptr);
  std::mt19937_64 rng(20261130);
  struct Tracked {
    Block* b;
    std::vector<std::uint8_t> bytes;
  };
  std::vector<Tracked> blocks(12);
  std::uint64_t seed = 1;
  auto fresh = [&](Tracked& t) {
    t.b = alloc(*a);
    ASSERT_NE(t.b, nullptr);
    ASSERT_EQ(fill(*a, t.b, nullptr, ++seed), CUDA_SUCCESS);
    t.bytes = expected(kBytes, seed);
  };
  for (Tracked& t : blocks) fresh(t);
  std::vector<const char*> calls(std::begin(kFetchCalls), std::end(kFetchCalls));
  calls.insert(calls.end(), std::begin(kSpillCalls), std::end(kSpillCalls));
  for (int op = 0; op < 600; ++op) {
    Tracked& t = blocks[rng() % blocks.size()];
    ASSERT_EQ(simdev_inject_fault(calls[rng() % calls.size()], 1 + rng() % 3, 0), 0);
    switch (rng() % 7 / 2) {
      case 0:
        (void)a->spill(t.b);
        break;
      case 1:
        (void)a->prefetch(t.b, nullptr);
        break;
      case 2: {  // a launch, if its block could be made usable
        Block* bs[1] = {t.b};
        if (a->ensure_resident(bs, nullptr) != CUDA_SUCCESS) break;
        const std::uint64_t mask_seed = ++seed;
        const CUresult r = launch3(xor_kernel(), nullptr, t.b->va, t.b->size, mask_seed);
        if (r == CUDA_SUCCESS) {
          const std::vector<std::uint8_t> mask = expected(kBytes, mask_seed);
          for (std::size_t i = 0; i < kBytes; ++i) t.bytes[i] ^= mask[i];
          (void)a->record_use(bs, nullptr);
        }
        a->release(bs);
        break;
      }
      default:
        simdev_clear_faults();  // the free and the new block are not under test
        CU_OK(cuCtxSynchronize());
        CU_OK(a->free(t.b->va, nullptr));
        fresh(t);
        break;
    }
    // Kernels done before the next move: a use that failed to record is
    // another matter.
    simdev_clear_faults();
    ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS) << "op " << op;
    if (rng() % 8 == 0) a->drain();
  }
  a->drain();
  std::vector<std::uint8_t> got;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    CU_OK(read(*a, blocks[i].b, &got));
    EXPECT_TRUE(got == blocks[i].bytes) << "block " << i;
  }
  for (Tracked& t : blocks) CU_OK(a->free(t.b->va, nullptr));
}

INSTANTIATE_TEST_SUITE_P(Allocator, FetchFailure,
                         ::testing::Combine(::testing::Values(SpillMode::Remap, SpillMode::Copy),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return mode_name(std::get<0>(i.param)) + (std::get<1>(i.param) ? "_spare" : "_new_chunk");
                         });
INSTANTIATE_TEST_SUITE_P(Allocator, SpillFailure, ::testing::Values(SpillMode::Remap, SpillMode::Copy),
                         [](const ::testing::TestParamInfo<SpillMode>& i) { return mode_name(i.param); });
INSTANTIATE_TEST_SUITE_P(Allocator, FetchCounts, ::testing::Values(SpillMode::Remap, SpillMode::Copy),
                         [](const ::testing::TestParamInfo<SpillMode>& i) { return mode_name(i.param); });
INSTANTIATE_TEST_SUITE_P(Allocator, RandomFaults, ::testing::Values(SpillMode::Remap, SpillMode::Copy),
                         [](const ::testing::TestParamInfo<SpillMode>& i) { return mode_name(i.param); });

// A use waited for on the host whose event waits and stream synchronize
// all fail falls back to querying the stream, not to a context synchronize:
// that would invalidate a capture another thread has open in the context
// (the driver refuses a context synchronize during a capture).
TEST(WaitHost, AFailedStreamSynchronizeLeavesAnotherThreadsCaptureValid) {
  Env::get().bind();
  CUstream s = nullptr, c = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&c, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  UseEvent no_event;  // a null event: both event waits fail
  const UseSlot use{s, &no_event, 1};
  std::atomic<int> stage{0};
  CUresult ended = CUDA_ERROR_UNKNOWN;
  std::thread capturer([&] {
    Env::get().bind();
    if (cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS) stage = -1;
    else stage = 1;
    while (stage == 1) std::this_thread::yield();
    CUgraph g = nullptr;
    ended = cuStreamEndCapture(c, &g);
    if (g != nullptr) cuGraphDestroy(g);
  });
  while (stage == 0) std::this_thread::yield();
  if (stage != 1) {
    capturer.join();
    FAIL() << "the capture could not begin";
  }
  const unsigned long long fired_before = simdev_faults_fired();
  ASSERT_EQ(simdev_inject_fault("cuStreamSynchronize", 1, 0), 0);
  const CUresult waited = UseTracker::wait_host(use);
  const unsigned long long fired = simdev_faults_fired() - fired_before;
  simdev_clear_faults();
  stage = 2;
  capturer.join();
  EXPECT_EQ(waited, CUDA_SUCCESS);
  EXPECT_GE(fired, 1u) << "the stream's synchronize was never made to fail: nothing was tested";
  EXPECT_EQ(ended, CUDA_SUCCESS) << "the other thread's capture was invalidated";
  cuStreamDestroy(s);
  cuStreamDestroy(c);
}

}  // namespace
}  // namespace tierrt::alloc::testing
