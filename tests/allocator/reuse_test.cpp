// Freed memory and the work still using it: a freed block or slab slot is
// handed out again only once every use recorded on it completed, or to a
// stream-ordered allocation whose stream then waits for those uses; a use
// that could not be recorded keeps its memory in use until its stream is
// idle; small allocations share slabs across streams and threads, and empty
// slabs go back to the device.
#include <algorithm>
#include <array>
#include <chrono>
#include <initializer_list>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "driver/driver.h"
#include "driver/stream_key.h"
#include "tests/allocator/sim_support.h"

namespace tierrt::alloc::testing {
namespace {

constexpr std::size_t KiB = 1u << 10, MiB = 1u << 20;

std::unique_ptr<Allocator> make(SpillMode m, Options o = {}) {
  Env::get().bind();
  o.mode = m;
  CUresult r = CUDA_SUCCESS;
  auto a = Allocator::create(o, &r);
  EXPECT_EQ(r, CUDA_SUCCESS) << drv::result_name(r);
  return a;
}

// What the runtime does around work that names `ptrs`: each one's use
// target (its block, or its slab's use record) made usable, the work
// enqueued, the use recorded.
template <class F>
CUresult use_ptrs(Allocator& a, std::initializer_list<CUdeviceptr> ptrs, CUstream s, F&& enqueue) {
  std::array<Block*, 4> targets{};
  std::size_t n = 0;
  for (CUdeviceptr p : ptrs)
    if (Block* b = a.use_target(p)) targets[n++] = b;
  return use_blocks(a, std::span<Block* const>(targets.data(), n), s, enqueue);
}

struct Streams {
  CUstream reader = nullptr, writer = nullptr;
  Streams() {
    EXPECT_EQ(cuStreamCreate(&reader, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamCreate(&writer, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  ~Streams() {
    (void)cuCtxSynchronize();
    (void)cuStreamDestroy(reader);
    (void)cuStreamDestroy(writer);
  }
};

// A kernel on `reader` checksums [x, x+n) at the end of its 50 ms; x is
// freed and an allocation of the same size is set on `writer` meanwhile.
// Returns the checksum the kernel saw; `*y` is the new allocation.
std::uint64_t free_and_reallocate_under_a_reader(Allocator& a, const Streams& st, CUdeviceptr x, std::size_t n,
                                                 CUstream free_on, CUstream alloc_on, CUdeviceptr* y) {
  const Kernels& k = Env::get().k;
  CUdeviceptr sum = 0;
  EXPECT_EQ(cuMemAlloc(&sum, 8), CUDA_SUCCESS);
  late_gate() = false;
  EXPECT_EQ(use_ptrs(a, {x}, st.reader, [&] { return launch3(k.sum_late, st.reader, x, n, sum); }), CUDA_SUCCESS);
  EXPECT_EQ(a.free(x, free_on), CUDA_SUCCESS);
  EXPECT_EQ(a.allocate(y, n, alloc_on), CUDA_SUCCESS);
  EXPECT_EQ(use_ptrs(a, {*y}, st.writer, [&] { return cuMemsetD8Async(*y, 0xee, n, st.writer); }), CUDA_SUCCESS);
  late_gate() = true;
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  std::uint64_t got = 0;
  EXPECT_EQ(cuMemcpyDtoH(&got, sum, 8), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(sum), CUDA_SUCCESS);
  return got;
}

std::uint64_t checksum_of_pattern(std::size_t n, std::uint64_t seed) {
  const auto v = expected(n, seed);
  return checksum(v.data(), n);
}

// Fills [p, p+n) with pattern(seed) through the launch protocol, and waits.
CUresult fill_ptr(Allocator& a, CUdeviceptr p, std::size_t n, CUstream s, std::uint64_t seed) {
  const Kernels& k = Env::get().k;
  const CUresult r = use_ptrs(a, {p}, s, [&] { return launch3(k.fill, s, p, n, seed); });
  return r == CUDA_SUCCESS ? cuStreamSynchronize(s) : r;
}

class Reuse : public ::testing::TestWithParam<SpillMode> {};
class UnrecordedUse : public ::testing::TestWithParam<SpillMode> {};
class Slabs : public ::testing::TestWithParam<SpillMode> {};

std::string mode_name(const ::testing::TestParamInfo<SpillMode>& i) {
  return i.param == SpillMode::Remap ? "remap" : "copy";
}

// cuMemFree, cuMemAlloc of the same size, a memset on another non-blocking
// stream: the kernel still reading the freed block reads its own bytes.
TEST_P(Reuse, AFreedBlockIsNotHandedOutWhileAKernelStillReadsIt) {
  auto a = make(GetParam());
  Streams st;
  constexpr std::size_t n = 4 * MiB;
  CUdeviceptr x = 0, y = 0;
  CU_OK(a->allocate(&x, n, CU_STREAM_LEGACY));
  CU_OK(fill_ptr(*a, x, n, st.reader, 7));
  EXPECT_EQ(free_and_reallocate_under_a_reader(*a, st, x, n, CU_STREAM_LEGACY, CU_STREAM_LEGACY, &y),
            checksum_of_pattern(n, 7));
  EXPECT_NE(y, x);
  // Once nothing uses it, the freed block is handed out again.
  CUdeviceptr z = 0;
  CU_OK(a->allocate(&z, n, CU_STREAM_LEGACY));
  EXPECT_EQ(z, x);
  CU_OK(a->free(y, CU_STREAM_LEGACY));
  CU_OK(a->free(z, CU_STREAM_LEGACY));
}

// The same for a small allocation (a slab whose slots are all taken, so
// that only the freed one could be handed out).
TEST_P(Reuse, AFreedSlotIsNotHandedOutWhileAKernelStillReadsIt) {
  auto a = make(GetParam());
  Streams st;
  constexpr std::size_t n = 600 * KiB;  // 1 MiB slots: two per slab
  CUdeviceptr x = 0, other = 0, y = 0;
  CU_OK(a->allocate(&x, n, CU_STREAM_LEGACY));
  CU_OK(a->allocate(&other, n, CU_STREAM_LEGACY));
  ASSERT_EQ(a->lookup(x), nullptr);  // a slot, not a block
  CU_OK(fill_ptr(*a, x, n, st.reader, 9));
  EXPECT_EQ(free_and_reallocate_under_a_reader(*a, st, x, n, CU_STREAM_LEGACY, CU_STREAM_LEGACY, &y),
            checksum_of_pattern(n, 9));
  EXPECT_NE(y, x);
  // Idle now: handed out again once the free slot of y's slab is taken.
  CUdeviceptr z1 = 0, z2 = 0;
  CU_OK(a->allocate(&z1, n, CU_STREAM_LEGACY));
  CU_OK(a->allocate(&z2, n, CU_STREAM_LEGACY));
  EXPECT_TRUE(z1 == x || z2 == x);
  for (CUdeviceptr p : {other, y, z1, z2}) CU_OK(a->free(p, CU_STREAM_LEGACY));
}

// cuMemFreeAsync on the stream that used the slot last, then
// cuMemAllocAsync on another: the slot may come back at once, but the new
// owner's stream waits for the freeing stream's work.
TEST_P(Reuse, ASlotFreedOnOneStreamIsReusedOnAnotherOnlyAfterTheFreeingStreamsWork) {
  auto a = make(GetParam());
  Streams st;
  constexpr std::size_t n = 600 * KiB;
  CUdeviceptr x = 0, other = 0, y = 0;
  CU_OK(a->allocate(&x, n, st.writer));
  CU_OK(a->allocate(&other, n, st.writer));
  CU_OK(fill_ptr(*a, x, n, st.writer, 11));
  EXPECT_EQ(free_and_reallocate_under_a_reader(*a, st, x, n, st.reader, st.writer, &y), checksum_of_pattern(n, 11));
  EXPECT_EQ(y, x);  // stream-ordered: handed out at once, the writer waited
  for (CUdeviceptr p : {other, y}) CU_OK(a->free(p, st.writer));
}

// The same for a block: freed on the reader, reallocated on the writer.
TEST_P(Reuse, ABlockFreedOnOneStreamIsReusedOnAnotherOnlyAfterTheFreeingStreamsWork) {
  auto a = make(GetParam());
  Streams st;
  constexpr std::size_t n = 4 * MiB;
  CUdeviceptr x = 0, y = 0;
  CU_OK(a->allocate(&x, n, st.writer));
  CU_OK(fill_ptr(*a, x, n, st.writer, 12));
  EXPECT_EQ(free_and_reallocate_under_a_reader(*a, st, x, n, st.reader, st.writer, &y), checksum_of_pattern(n, 12));
  EXPECT_EQ(y, x);  // stream-ordered: handed out at once, the writer waited
  CU_OK(a->free(y, st.writer));
}

TEST_P(Reuse, DoubleAndInteriorFreesOfASlotAreRefused) {
  auto a = make(GetParam());
  CUdeviceptr x = 0;
  CU_OK(a->allocate(&x, 100, nullptr));
  EXPECT_EQ(a->free(x + 16, nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_OK(a->free(x, nullptr));
  EXPECT_EQ(a->free(x, nullptr), CUDA_ERROR_INVALID_VALUE);
  // Freed once, handed out once.
  CUdeviceptr p = 0, q = 0;
  CU_OK(a->allocate(&p, 100, nullptr));
  CU_OK(a->allocate(&q, 100, nullptr));
  EXPECT_NE(p, q);
  CU_OK(a->free(p, nullptr));
  CU_OK(a->free(q, nullptr));
}

// cuEventRecord fails for the reader's use: the block is in use until the
// reader's stream is idle, and is not handed out under it.
TEST_P(UnrecordedUse, KeepsAFreedBlockFromBeingHandedOut) {
  auto a = make(GetParam());
  Streams st;
  const Kernels& k = Env::get().k;
  constexpr std::size_t n = 4 * MiB;
  CUdeviceptr x = 0, y = 0, sum = 0;
  CU_OK(a->allocate(&x, n, CU_STREAM_LEGACY));
  CU_OK(fill_ptr(*a, x, n, st.reader, 21));
  CU_OK(cuMemAlloc(&sum, 8));
  late_gate() = false;
  ASSERT_EQ(simdev_inject_fault("cuEventRecord", 1, 0), 0);
  EXPECT_NE(use_ptrs(*a, {x}, st.reader, [&] { return launch3(k.sum_late, st.reader, x, n, sum); }), CUDA_SUCCESS);
  simdev_clear_faults();
  CU_OK(a->free(x, CU_STREAM_LEGACY));
  CU_OK(a->allocate(&y, n, CU_STREAM_LEGACY));
  EXPECT_NE(y, x);
  CU_OK(use_ptrs(*a, {y}, st.writer, [&] { return cuMemsetD8Async(y, 0xee, n, st.writer); }));
  late_gate() = true;
  CU_OK(cuCtxSynchronize());
  std::uint64_t got = 0;
  CU_OK(cuMemcpyDtoH(&got, sum, 8));
  EXPECT_EQ(got, checksum_of_pattern(n, 21));
  CU_OK(cuMemFree(sum));
  CU_OK(a->free(y, CU_STREAM_LEGACY));
}

// A memset of x on the reader's stream whose use event could not be
// recorded, then a capture begun on that stream.
void unrecorded_use_then_capture(Allocator& a, Streams& st, CUdeviceptr x, std::size_t n) {
  ASSERT_EQ(simdev_inject_fault("cuEventRecord", 1, 0), 0);
  EXPECT_NE(use_ptrs(a, {x}, st.reader, [&] { return cuMemsetD8Async(x, 1, n, st.reader); }), CUDA_SUCCESS);
  simdev_clear_faults();
  CU_OK(cuStreamBeginCapture(st.reader, CU_STREAM_CAPTURE_MODE_RELAXED));
}

// A use with no event on a stream that then begins a capture: asking whether
// it is over must not query that stream (the driver would end the capture).
TEST_P(UnrecordedUse, OnAStreamThatBeganACaptureLeavesTheCaptureAlone) {
  auto a = make(GetParam());
  Streams st;
  constexpr std::size_t n = 4 * MiB;
  CUdeviceptr x = 0, y = 0;
  CU_OK(a->allocate(&x, n, CU_STREAM_LEGACY));
  ASSERT_NO_FATAL_FAILURE(unrecorded_use_then_capture(*a, st, x, n));
  CU_OK(a->free(x, CU_STREAM_LEGACY));
  CU_OK(a->allocate(&y, n, CU_STREAM_LEGACY));  // looks at the freed block's use
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture(st.reader, &g), CUDA_SUCCESS) << "tierrt ended the application's capture";
  if (g != nullptr) CU_OK(cuGraphDestroy(g));
  CU_OK(cuCtxSynchronize());
  CU_OK(a->free(y, CU_STREAM_LEGACY));
}

// The same use, and the block freed on another stream and asked for there:
// waiting for the use is refused while its stream captures, so fresh memory
// is handed out (the driver's own allocator would not fail either).
TEST_P(UnrecordedUse, OnACapturingStreamLeavesTheCachedBlockForFreshMemory) {
  auto a = make(GetParam());
  Streams st;
  constexpr std::size_t n = 4 * MiB;
  CUdeviceptr x = 0, y = 0;
  CU_OK(a->allocate(&x, n, st.writer));
  ASSERT_NO_FATAL_FAILURE(unrecorded_use_then_capture(*a, st, x, n));
  CU_OK(a->free(x, st.writer));
  EXPECT_EQ(a->allocate(&y, n, st.writer), CUDA_SUCCESS) << "an allocation failed for a capture elsewhere";
  EXPECT_NE(y, x);
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture(st.reader, &g), CUDA_SUCCESS);
  if (g != nullptr) CU_OK(cuGraphDestroy(g));
  CU_OK(cuCtxSynchronize());
  if (y != 0) CU_OK(a->free(y, st.writer));
}

// cuEventCreate fails (no pooled event is left): the same.
TEST_P(UnrecordedUse, OfAnEventThatCouldNotBeCreatedKeepsAFreedSlotFromBeingHandedOut) {
  auto a = make(GetParam());
  Streams st;
  const Kernels& k = Env::get().k;
  constexpr std::size_t n = 600 * KiB;
  CUdeviceptr x = 0, other = 0, y = 0, sum = 0;
  CU_OK(a->allocate(&x, n, CU_STREAM_LEGACY));
  CU_OK(a->allocate(&other, n, CU_STREAM_LEGACY));
  CU_OK(cuMemAlloc(&sum, 8));
  late_gate() = false;
  ASSERT_EQ(simdev_inject_fault("cuEventCreate", 1, 0), 0);
  EXPECT_NE(use_ptrs(*a, {x}, st.reader, [&] { return launch3(k.fill_late, st.reader, x, n, 22); }), CUDA_SUCCESS);
  simdev_clear_faults();
  CU_OK(a->free(x, CU_STREAM_LEGACY));
  CU_OK(a->allocate(&y, n, CU_STREAM_LEGACY));
  EXPECT_NE(y, x);
  CU_OK(use_ptrs(*a, {y}, st.writer, [&] { return cuMemsetD8Async(y, 0xee, n, st.writer); }));
  late_gate() = true;
  CU_OK(cuCtxSynchronize());
  std::vector<std::uint8_t> got(n);
  CU_OK(cuMemcpyDtoH(got.data(), y, n));
  EXPECT_EQ(got, std::vector<std::uint8_t>(n, 0xee));
  CU_OK(cuMemFree(sum));
  for (CUdeviceptr p : {other, y}) CU_OK(a->free(p, CU_STREAM_LEGACY));
}

// A kernel still writing the block when its use could not be recorded: a
// spill waits for its stream, so the host copy holds what it wrote.
TEST_P(UnrecordedUse, MakesASpillWaitForTheStream) {
  auto a = make(GetParam());
  Streams st;
  const Kernels& k = Env::get().k;
  constexpr std::size_t n = 4 * MiB;
  CUdeviceptr x = 0;
  CU_OK(a->allocate(&x, n, st.reader));
  CU_OK(fill_ptr(*a, x, n, st.reader, 31));
  ASSERT_EQ(simdev_inject_fault("cuEventRecord", 1, 0), 0);
  EXPECT_NE(use_ptrs(*a, {x}, st.reader, [&] { return launch3(k.fill_late, st.reader, x, n, 32); }), CUDA_SUCCESS);
  simdev_clear_faults();
  Block* b = a->lookup(x);
  EXPECT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  EXPECT_EQ(b->st(), State::Spilled);
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, b, &got, st.writer));
  EXPECT_EQ(got, expected(n, 32));
  CU_OK(a->free(x, st.reader));
}

// The same on a thread's per-thread default stream, spilled from another
// thread: there CU_STREAM_PER_THREAD names the spilling thread's own
// (idle) stream, so only the thread that used the block can wait for it.
TEST_P(UnrecordedUse, OnAnotherThreadsDefaultStreamMakesASpillWaitForIt) {
  auto a = make(GetParam());
  const Kernels& k = Env::get().k;
  constexpr std::size_t n = 4 * MiB;
  CUdeviceptr x = 0;
  CU_OK(a->allocate(&x, n, CU_STREAM_LEGACY));
  CU_OK(fill_ptr(*a, x, n, CU_STREAM_LEGACY, 41));
  CU_OK(cuCtxSynchronize());
  // The kernel finishes a while after its launch, whoever waits for it.
  late_gate() = false;
  std::thread opener([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    late_gate() = true;
  });
  std::thread user([&] {
    Env::get().bind();
    const CUstream mine = drv::this_thread_stream_key();
    ASSERT_EQ(simdev_inject_fault("cuEventRecord", 1, 0), 0);
    EXPECT_NE(use_ptrs(*a, {x}, mine, [&] { return launch3(k.fill_late, CU_STREAM_PER_THREAD, x, n, 42); }),
              CUDA_SUCCESS);
    simdev_clear_faults();
  });
  user.join();
  Block* b = a->lookup(x);
  EXPECT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  EXPECT_EQ(b->st(), State::Spilled);
  std::vector<std::uint8_t> got;
  Streams st;
  CU_OK(read(*a, b, &got, st.writer));
  EXPECT_EQ(got, expected(n, 42));
  opener.join();
  CU_OK(a->free(x, CU_STREAM_LEGACY));
}

// Three streams, eight sizes from 4 KiB to 512 KiB, each allocated, used and
// freed stream-ordered: then a 40 MiB allocation fits a 64 MiB device (run
// with SIMDEV_MEM=64MiB), as it does without tierrt.
TEST_P(Slabs, SmallPairsOnManyStreamsLeaveRoomForALargeAllocation) {
  auto a = make(GetParam());
  std::array<CUstream, 3> streams{};
  for (CUstream& s : streams) CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (CUstream s : streams)
    for (std::size_t n = 4 * KiB; n <= 512 * KiB; n *= 2) {
      CUdeviceptr p = 0;
      CU_OK(a->allocate(&p, n, s));
      CU_OK(use_ptrs(*a, {p}, s, [&] { return cuMemsetD8Async(p, 1, n, s); }));
      CU_OK(a->free(p, s));
    }
  EXPECT_LE(a->stats().slab_bytes, 8 * 2 * MiB);  // one slab per size, whatever the stream
  CUdeviceptr big = 0;
  CU_OK(a->allocate(&big, 40 * MiB, streams[0]));
  CU_OK(a->free(big, streams[0]));
  CU_OK(cuCtxSynchronize());
  for (CUstream s : streams) CU_OK(cuStreamDestroy(s));
}

// The same pairs under a device budget the kept slabs would overflow: the
// rescue returns them.
TEST_P(Slabs, TheRescueReleasesEmptySlabs) {
  Options o;
  o.device_budget = 44 * MiB;
  auto a = make(GetParam(), o);
  CUstream s = nullptr;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (std::size_t n = 4 * KiB; n <= 512 * KiB; n *= 2) {
    CUdeviceptr p = 0;
    CU_OK(a->allocate(&p, n, s));
    CU_OK(use_ptrs(*a, {p}, s, [&] { return cuMemsetD8Async(p, 1, n, s); }));
    CU_OK(a->free(p, s));
  }
  EXPECT_GT(a->stats().slab_bytes, 4 * MiB);  // one empty slab kept per size
  CUdeviceptr big = 0;
  CU_OK(a->allocate(&big, 40 * MiB, s));
  EXPECT_EQ(a->stats().slab_bytes, 0u);
  CU_OK(a->free(big, s));
  CU_OK(cuCtxSynchronize());
  CU_OK(cuStreamDestroy(s));
}

TEST_P(Slabs, EmptySlabsGoBackOnceTheirUsesCompleted) {
  auto a = make(GetParam());
  Streams st;
  const Kernels& k = Env::get().k;
  constexpr std::size_t n = 600 * KiB;
  std::array<CUdeviceptr, 4> p{};  // two slabs
  for (CUdeviceptr& x : p) CU_OK(a->allocate(&x, n, CU_STREAM_LEGACY));
  EXPECT_EQ(a->stats().slab_bytes, 4 * MiB);
  late_gate() = false;
  CU_OK(use_ptrs(*a, {p[0]}, st.reader, [&] { return launch3(k.fill_late, st.reader, p[0], n, 3); }));
  for (CUdeviceptr x : p) CU_OK(a->free(x, CU_STREAM_LEGACY));
  a->release_empty_slabs();
  EXPECT_EQ(a->stats().slab_bytes, 2 * MiB);  // the one the kernel still writes stays
  late_gate() = true;
  CU_OK(cuStreamSynchronize(st.reader));
  a->release_empty_slabs();
  EXPECT_EQ(a->stats().slab_bytes, 0u);
}

// Four threads, each on its own stream, making 128-byte allocations: one
// slab between them, so that an 8 MiB device (SIMDEV_MEM=8MiB) holds them.
TEST_P(Slabs, ThreadsOnTheirOwnStreamsShareOneSlab) {
  auto a = make(GetParam());
  constexpr int kThreads = 4, kEach = 200;
  std::array<std::vector<CUdeviceptr>, kThreads> got;
  std::array<CUresult, kThreads> result{};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Env::get().bind();
      CUstream s = nullptr;
      result[t] = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
      for (int i = 0; i < kEach && result[t] == CUDA_SUCCESS; ++i) {
        CUdeviceptr p = 0;
        result[t] = a->allocate(&p, 128, s);
        if (result[t] == CUDA_SUCCESS) got[t].push_back(p);
      }
      if (result[t] == CUDA_SUCCESS) result[t] = cuStreamSynchronize(s);
      (void)cuStreamDestroy(s);
    });
  for (std::thread& th : threads) th.join();
  for (CUresult r : result) EXPECT_EQ(r, CUDA_SUCCESS) << drv::result_name(r);
  EXPECT_EQ(a->stats().slab_bytes, 2 * MiB);
  for (auto& v : got)
    for (CUdeviceptr p : v) CU_OK(a->free(p, nullptr));
}

// Threads allocating, filling, checking and freeing small allocations on
// their streams, stream-ordered or not, freeing on another stream than the
// one that used them: no live allocation is ever handed out twice, every
// byte written is read back.
TEST_P(Slabs, NoLiveSlotIsEverHandedToTwoThreads) {
  auto a = make(GetParam());
  constexpr int kThreads = 4, kRounds = 300;
  std::mutex mu;
  std::map<CUdeviceptr, std::size_t> live;  // start -> bytes
  std::atomic<int> overlaps{0}, wrong{0}, failures{0};
  auto claim = [&](CUdeviceptr p, std::size_t n) {
    std::lock_guard<std::mutex> g(mu);
    auto next = live.lower_bound(p);
    if (next != live.end() && next->first < p + n) ++overlaps;
    if (next != live.begin() && std::prev(next)->first + std::prev(next)->second > p) ++overlaps;
    live[p] = n;
  };
  auto unclaim = [&](CUdeviceptr p) {
    std::lock_guard<std::mutex> g(mu);
    live.erase(p);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Env::get().bind();
      std::mt19937_64 rng(1000 + t);
      CUstream use = nullptr, other = nullptr;
      if (cuStreamCreate(&use, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
          cuStreamCreate(&other, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        ++failures;
        return;
      }
      std::vector<std::pair<CUdeviceptr, std::size_t>> held;
      std::vector<std::uint8_t> back;
      for (int round = 0; round < kRounds; ++round) {
        const std::size_t n = 1 + rng() % (64 * KiB);
        CUdeviceptr p = 0;
        if (a->allocate(&p, n, rng() % 2 ? use : CU_STREAM_LEGACY) != CUDA_SUCCESS) {
          ++failures;
          break;
        }
        claim(p, n);
        const std::uint64_t seed = rng();
        back.assign(n, 0);
        const CUresult r = use_ptrs(*a, {p}, use, [&] { return launch3(Env::get().k.fill, use, p, n, seed); });
        if (r != CUDA_SUCCESS || cuMemcpyDtoHAsync(back.data(), p, n, use) != CUDA_SUCCESS ||
            cuStreamSynchronize(use) != CUDA_SUCCESS) {
          ++failures;
          break;
        }
        if (back != expected(n, seed)) ++wrong;
        held.emplace_back(p, n);
        if (held.size() > 8) {
          const std::size_t i = rng() % held.size();
          unclaim(held[i].first);
          if (a->free(held[i].first, rng() % 2 ? other : CU_STREAM_LEGACY) != CUDA_SUCCESS) ++failures;
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      for (auto& [p, n] : held) {
        unclaim(p);
        if (a->free(p, other) != CUDA_SUCCESS) ++failures;
      }
      (void)cuStreamSynchronize(other);
      (void)cuStreamDestroy(use);
      (void)cuStreamDestroy(other);
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  CU_OK(cuCtxSynchronize());
  a->release_empty_slabs();
  EXPECT_EQ(a->stats().slab_bytes, 0u);
}

// Slabs made and released as fast as threads can: a release that saw a
// slab empty must not act on it once the same object holds a new slab (it
// would unlink a slab that is not in its pool and destroy a range whose
// first slot was just handed out).
TEST_P(Slabs, AReleaseNeverTakesASlabThatWasMadeAgainMeanwhile) {
  auto a = make(GetParam());
  constexpr int kThreads = 4, kReleasers = 2, kRounds = 3000;
  constexpr std::size_t kSlot = 1 * MiB;  // the largest class: two slots per slab
  constexpr std::size_t kChecked = 4 * KiB;
  std::atomic<int> failures{0}, wrong{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> releasers;
  for (int r = 0; r < kReleasers; ++r)
    releasers.emplace_back([&] {
      Env::get().bind();
      while (!done.load()) a->release_empty_slabs();
    });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Env::get().bind();
      std::vector<std::uint8_t> back(kChecked);
      for (int round = 0; round < kRounds; ++round) {
        CUdeviceptr p = 0;
        if (a->allocate(&p, kSlot - 64, CU_STREAM_LEGACY) != CUDA_SUCCESS) {
          ++failures;
          break;
        }
        const auto value = static_cast<unsigned char>(t * 31 + round);
        if (cuMemsetD8(p, value, kChecked) != CUDA_SUCCESS || cuMemcpyDtoH(back.data(), p, kChecked) != CUDA_SUCCESS)
          ++failures;
        else if (std::count(back.begin(), back.end(), value) != static_cast<std::ptrdiff_t>(kChecked))
          ++wrong;
        if (a->free(p, CU_STREAM_LEGACY) != CUDA_SUCCESS) ++failures;
      }
    });
  for (std::thread& th : threads) th.join();
  done = true;
  for (std::thread& th : releasers) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  a->release_empty_slabs();
  EXPECT_EQ(a->stats().slab_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Allocator, Reuse, ::testing::Values(SpillMode::Remap, SpillMode::Copy), mode_name);
INSTANTIATE_TEST_SUITE_P(Allocator, UnrecordedUse, ::testing::Values(SpillMode::Remap, SpillMode::Copy), mode_name);
INSTANTIATE_TEST_SUITE_P(Allocator, Slabs, ::testing::Values(SpillMode::Remap, SpillMode::Copy), mode_name);

}  // namespace
}  // namespace tierrt::alloc::testing
