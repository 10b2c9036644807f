// The allocator on simdev: DESIGN.md's invariants of "Blocks and their
// states" (one test each), the cache, OOM rescue and the host budget.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "allocator/capture_gate.h"
#include "driver/driver.h"
#include "allocator/use_tracker.h"
#include "tests/allocator/sim_support.h"

namespace tierrt::alloc::testing {
namespace {

constexpr std::size_t MiB = 1u << 20;

std::unique_ptr<Allocator> make(SpillMode m, Options o = {}) {
  Env::get().bind();
  o.mode = m;
  apply_lazy_uses(&o);
  CUresult r = CUDA_SUCCESS;
  auto a = Allocator::create(o, &r);
  EXPECT_EQ(r, CUDA_SUCCESS) << drv::result_name(r);
  if (a) {
    EXPECT_EQ(a->mode(), m);
  }
  return a;
}

Block* alloc(Allocator& a, std::size_t n, CUstream s = nullptr) {
  CUdeviceptr p = 0;
  EXPECT_EQ(a.allocate(&p, n, s), CUDA_SUCCESS);
  Block* b = a.lookup(p);
  EXPECT_NE(b, nullptr);
  return b;
}

class Modes : public ModeSuite {};

// Invariant: a block's bytes after any spill / fetch cycle equal its bytes
// before, bit for bit.
TEST_P(Modes, InvariantBytesEqualAfterSpillFetchCycle) {
  auto a = make(GetParam());
  for (std::size_t n : {MiB, 3 * MiB + 17, 16 * MiB}) {
    Block* b = alloc(*a, n);
    CU_OK(fill(*a, b, nullptr, n));
    for (int cycle = 0; cycle < 3; ++cycle) {
      a->drain();  // a fetch not yet finalised answers Busy
      ASSERT_EQ(a->spill(b), SpillResult::Started);
      a->drain();
      ASSERT_EQ(b->st(), State::Spilled);
      if (cycle == 1) {
        CU_OK(a->prefetch(b, nullptr));  // else a demand fetch
      }
      std::vector<std::uint8_t> got;
      CU_OK(read(*a, b, &got));
      ASSERT_EQ(got, expected(n, n)) << "size " << n << " cycle " << cycle;
    }
    CU_OK(a->free(b->va, nullptr));
  }
  CU_OK(cuCtxSynchronize());
}

// Invariant: device physical memory of a block is released only after its
// D2H copy completed and every launch that named it has completed.
TEST_P(Modes, InvariantDeviceMemoryReleasedOnlyAfterCopyAndUses) {
  auto a = make(GetParam());
  Block* b = alloc(*a, 8 * MiB);
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const auto before = simdev_device_bytes_in_use();
  CU_OK(fill(*a, b, s, 42, /*slow=*/true));  // the stream is busy 50 ms
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  // What is seen while the fill still runs (the stream says so after the
  // look): the spill waits for it, its device memory still held. A loaded
  // machine may let the fill end before the first look; then the look
  // proves nothing and is not counted.
  const State seen = b->st();
  const auto held = simdev_device_bytes_in_use();
  const auto spares = a->stats().spare_device_bytes;
  if (cuStreamQuery(s) == CUDA_ERROR_NOT_READY) {
    EXPECT_EQ(seen, State::Spilling);
    EXPECT_EQ(held, before);  // still held: a use is in flight
    EXPECT_EQ(spares, 0u);
  } else {
    std::printf("the fill ended before the spill could be looked at: nothing checked in flight\n");
  }
  a->drain();
  EXPECT_EQ(b->st(), State::Spilled);
  // Now it is released, to the driver or (unmapped) to the spares kept for
  // the next fetch.
  EXPECT_LT(simdev_device_bytes_in_use() - a->stats().spare_device_bytes, before);
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, b, &got, s));
  EXPECT_EQ(got, expected(8 * MiB, 42));  // the copy saw the launch's bytes
  CU_OK(a->free(b->va, s));
  CU_OK(cuStreamDestroy(s));
}

// Invariant: a launch, copy or memset is never enqueued against a VA that is
// unmapped. Launches race spills; simdev's sticky illegal-address error
// would tell.
TEST_P(Modes, InvariantNothingEnqueuedAgainstUnmappedVa) {
  auto a = make(GetParam());
  std::vector<Block*> bs;
  for (int i = 0; i < 16; ++i) bs.push_back(alloc(*a, 2 * MiB + i * 4096));
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::atomic<bool> stop{false};
  std::thread spiller([&] {
    Env::get().bind();
    std::uint64_t i = 0;
    while (!stop.load()) {
      Block* b = bs[mix(i++) % bs.size()];
      (void)a->spill(b);
      if (i % 7 == 0) (void)a->prefetch(b, nullptr);
    }
  });
  std::vector<std::uint64_t> seed(bs.size(), 0);
  for (int it = 0; it < 400; ++it) {
    const std::size_t k = mix(it + 1000) % bs.size();
    seed[k] = it + 1;
    CU_OK(fill(*a, bs[k], s, seed[k]));
  }
  stop = true;
  spiller.join();
  CU_OK(cuStreamSynchronize(s));
  for (std::size_t k = 0; k < bs.size(); ++k) {
    if (seed[k] == 0) continue;
    std::vector<std::uint8_t> got;
    CU_OK(read(*a, bs[k], &got, s));
    EXPECT_EQ(got, expected(bs[k]->size, seed[k])) << k;
  }
  CU_OK(cuCtxSynchronize());  // no sticky CUDA_ERROR_ILLEGAL_ADDRESS
  CU_OK(cuStreamDestroy(s));
}

// Invariant: a prefetch that the consumer's stream has not waited for is
// never relied on: the consumer stream waits on the prefetch event, with no
// host synchronisation.
TEST_P(Modes, InvariantConsumerStreamWaitsOnPrefetchEvent) {
  auto a = make(GetParam());
  const std::size_t n = 64 * MiB;  // 16 ms each way on the throttled link
  Block* b = alloc(*a, n);
  CUdeviceptr out = 0;
  CU_OK(a->allocate(&out, 8, nullptr));
  CU_OK(fill(*a, b, nullptr, 7));
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  CUstream consumer;
  CU_OK(cuStreamCreate(&consumer, CU_STREAM_NON_BLOCKING));
  drv::reset_counts();
  drv::set_counting(true);
  CU_OK(a->prefetch(b, consumer));
  drv::set_counting(false);
  // No host synchronisation: prefetch returns with the copy enqueued (64
  // MiB at 4 GB/s takes 16 ms), and the consumer waits on its event. Told
  // by the calls made, not by a time, which a loaded machine stretches (the
  // counts are the process's: cuEventSynchronize is the mover thread's own
  // wait for the copy, so it is not counted).
  EXPECT_NE(b->st(), State::Spilled);
  EXPECT_EQ(drv::calls(drv::Id::cuStreamSynchronize) + drv::calls(drv::Id::cuCtxSynchronize), 0u);
  EXPECT_GE(drv::calls(drv::Id::cuStreamWaitEvent), 1u);
  // The consumer's kernel goes in right away; it must see every byte.
  Block* bs[1] = {b};
  CU_OK(use_blocks(*a, bs, consumer, [&] { return launch3(Env::get().k.sum, consumer, b->va, n, out); }));
  std::uint64_t h = 0;
  CU_OK(cuMemcpyDtoHAsync(&h, out, 8, consumer));
  CU_OK(cuStreamSynchronize(consumer));
  const auto want = expected(n, 7);
  EXPECT_EQ(h, checksum(want.data(), n));
  CU_OK(a->free(b->va, consumer));
  CU_OK(a->free(out, consumer));
  CU_OK(cuStreamDestroy(consumer));
}

// What the mover reports to the runtime's policy: every copy's bytes and
// device time, a launch that needed a spilled block (demand), and a launch
// that had to wait on a prefetch still under way (late, by how much).
struct RecordingObserver final : MoveObserver {
  std::atomic<int> demand{0}, demand_waited{0}, late{0}, to_host{0}, to_device{0};
  std::atomic<std::uint64_t> late_ns{0}, min_copy_ns{UINT64_MAX}, bytes{0};
  void demand_fetch(const Block&) noexcept override { ++demand; }
  void demand_fetch_waited(const Block&, std::uint64_t ns) noexcept override {
    if (ns > 0) ++demand_waited;
  }
  void late_fetch(const Block&, std::uint64_t ns) noexcept override {
    ++late;
    late_ns += ns;
  }
  std::atomic<int> stopped{0};
  std::string stopped_why;  // written before `stopped`
  void tiering_stopped(const char* why) noexcept override {
    stopped_why = why;
    ++stopped;
  }
  void copy_done(Direction d, std::uint64_t n, std::uint64_t ns) noexcept override {
    ++(d == Direction::ToHost ? to_host : to_device);
    bytes += n;
    std::uint64_t m = min_copy_ns.load();
    while (ns < m && !min_copy_ns.compare_exchange_weak(m, ns)) {
    }
  }
};

// Contained failure: the mover finds a broken invariant while it finalises
// a spill. Tiering stops (the observer hears it once), that spill ends with
// its block resident, no spill starts any more, spilled blocks come back,
// allocations over the budget pass it, and every byte is as written.
TEST_P(Modes, ContainedBrokenInvariantStopsTieringAndKeepsEveryByte) {
  Options o;
  o.device_budget = 32 * MiB;
  auto a = make(GetParam(), o);
  RecordingObserver seen;
  a->set_observer(&seen);
  std::vector<Block*> bs;
  for (int i = 0; i < 6; ++i) {
    bs.push_back(alloc(*a, 4 * MiB));
    CU_OK(fill(*a, bs.back(), nullptr, 300 + i));
  }
  ASSERT_EQ(a->spill(bs[0]), SpillResult::Started);
  a->drain();
  ASSERT_EQ(bs[0]->st(), State::Spilled);

  a->inject_broken_invariant();
  ASSERT_EQ(a->spill(bs[1]), SpillResult::Started);
  a->drain();
  EXPECT_EQ(bs[1]->st(), State::Resident);  // the spill under way ended with its block resident
  EXPECT_EQ(seen.stopped.load(), 1);
  EXPECT_NE(seen.stopped_why.find("injected by a test"), std::string::npos) << seen.stopped_why;
  ASSERT_NE(a->tiering_stopped(), nullptr);
  EXPECT_TRUE(a->stats().tiering_stopped);
  const std::uint64_t spills = a->stats().spills;
  EXPECT_EQ(a->spill(bs[2]), SpillResult::NotSpillable);
  a->stop_tiering("again");  // idempotent: heard once
  EXPECT_EQ(seen.stopped.load(), 1);

  EXPECT_EQ(a->recall(), 0u);
  a->drain();
  EXPECT_EQ(bs[0]->st(), State::Resident);
  // Past the budget with nothing spilled: the device has room.
  for (int i = 0; i < 6; ++i) {
    bs.push_back(alloc(*a, 4 * MiB));
    CU_OK(fill(*a, bs.back(), nullptr, 300 + bs.size() - 1));
  }
  EXPECT_GT(a->stats().device_used, o.device_budget);
  EXPECT_EQ(a->stats().spills, spills);
  for (std::size_t i = 0; i < bs.size(); ++i) {
    EXPECT_EQ(bs[i]->st(), State::Resident) << i;
    std::vector<std::uint8_t> got;
    CU_OK(read(*a, bs[i], &got));
    EXPECT_EQ(got, expected(4 * MiB, 300 + i)) << i;
  }
  for (Block* b : bs) CU_OK(a->free(b->va, nullptr));
  a->set_observer(nullptr);
}

// Tiering stopped while a spill's copy is on its way: the block stays
// resident with its bytes, and recall() brings back what was spilled before.
TEST_P(Modes, TieringStoppedMidSpillLeavesTheBlockResident) {
  auto a = make(GetParam());
  Block* done = alloc(*a, 8 * MiB);
  Block* moving = alloc(*a, 64 * MiB);  // 16 ms at the throttled 4 GB/s
  CU_OK(fill(*a, done, nullptr, 41));
  CU_OK(fill(*a, moving, nullptr, 42));
  ASSERT_EQ(a->spill(done), SpillResult::Started);
  a->drain();
  ASSERT_EQ(a->spill(moving), SpillResult::Started);
  a->stop_tiering("stopped by the test");
  a->drain();
  EXPECT_EQ(moving->st(), State::Resident);
  EXPECT_GE(a->stats().spills_failed, 1u);
  EXPECT_EQ(done->st(), State::Spilled);
  EXPECT_EQ(a->recall(), 0u);
  a->drain();
  EXPECT_EQ(done->st(), State::Resident);
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, moving, &got));
  EXPECT_EQ(got, expected(64 * MiB, 42));
  CU_OK(read(*a, done, &got));
  EXPECT_EQ(got, expected(8 * MiB, 41));
  CU_OK(a->free(done->va, nullptr));
  CU_OK(a->free(moving->va, nullptr));
}

TEST_P(Modes, ObserverHearsCopyTimesDemandAndLateFetches) {
  auto a = make(GetParam());
  RecordingObserver seen;
  a->set_observer(&seen);
  const std::size_t n = 64 * MiB;  // 16 ms each way on the 4 GB/s link
  Block* b = alloc(*a, n);
  CU_OK(fill(*a, b, nullptr, 3));
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  EXPECT_EQ(seen.to_host.load(), 1);
  // Device time of the copy: the link is throttled, so it cannot be faster.
  EXPECT_GE(seen.min_copy_ns.load(), n * 1e9 / 4e9 * 0.9);

  // A launch on the spilled block: a demand fetch, not a late one; its
  // stream, idle, waited for the copy.
  std::vector<std::uint8_t> back;
  CU_OK(read(*a, b, &back));
  a->drain();
  EXPECT_EQ(seen.demand.load(), 1);
  EXPECT_EQ(seen.demand_waited.load(), 1);
  EXPECT_EQ(seen.late.load(), 0);
  EXPECT_EQ(seen.to_device.load(), 1);

  // A prefetch the launch overtakes: late, by a part of the copy's time.
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  CU_OK(a->prefetch(b, nullptr));
  CU_OK(read(*a, b, &back));
  a->drain();
  EXPECT_EQ(seen.demand.load(), 1);
  EXPECT_EQ(seen.late.load(), 1);
  EXPECT_GT(seen.late_ns.load(), 0u);
  EXPECT_EQ(seen.to_host.load(), 2);
  EXPECT_EQ(seen.to_device.load(), 2);
  EXPECT_EQ(seen.bytes.load(), 4 * n);
  const auto want = expected(n, 3);
  EXPECT_TRUE(back == want);

  // A prefetch that completed before the launch: neither late nor demanded.
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  CU_OK(a->prefetch(b, nullptr));
  a->drain();
  CU_OK(read(*a, b, &back));
  EXPECT_EQ(seen.demand.load(), 1);
  EXPECT_EQ(seen.late.load(), 1);
  a->set_observer(nullptr);
  CU_OK(a->free(b->va, nullptr));
}

// A launch enqueued while its block's prefetch is under way, on a stream
// still busy with earlier work that outlasts the copy: the application is
// ahead of the device, and the stream never waits for the copy. Not late:
// lateness is on the device's clock, where the stream got to. The earlier
// work is a late kernel held until the copy was reported done, so the
// stream reaches the launch after the copy whatever the host's speed (a
// fixed 50 ms and then 100 ms of busy stream were both outrun under ASan
// on a loaded machine).
TEST_P(Modes, AFetchTheStreamReachesAfterItEndedMadeNothingWait) {
  auto a = make(GetParam());
  RecordingObserver seen;
  a->set_observer(&seen);
  const std::size_t n = 16 * MiB;
  Block* b = alloc(*a, n);
  Block* other = alloc(*a, 4 * MiB);
  CU_OK(fill(*a, b, nullptr, 5));
  // Enqueues the read of b behind a kernel on `other` that ends only once
  // b's copy to the device was reported; `fetch` starts that copy first
  // (a prefetch) or leaves it to the read (on demand). The read goes to
  // pinned memory: one to pageable memory returns only once it is done.
  void* pinned = nullptr;
  CU_OK(cuMemAllocHost(&pinned, n));
  const auto read_behind_busy_stream = [&](auto fetch) {
    ASSERT_EQ(a->spill(b), SpillResult::Started);
    a->drain();
    const int copies = seen.to_device.load();
    late_gate() = false;
    Block* busy[1] = {other};
    CU_OK(use_blocks(*a, busy, nullptr, [&] {
      return launch3(Env::get().k.fill_late, nullptr, other->va, other->size, 6);
    }));
    fetch();
    Block* bs[1] = {b};
    CU_OK(use_blocks(*a, bs, nullptr, [&] { return cuMemcpyDtoHAsync(pinned, b->va, n, nullptr); }));
    for (int ms = 0; ms < 10'000 && seen.to_device.load() == copies; ++ms)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(seen.to_device.load(), copies + 1) << "the copy was not reported within 10 s";
    late_gate() = true;
    CU_OK(cuStreamSynchronize(nullptr));
    a->drain();
    EXPECT_EQ(std::memcmp(pinned, expected(n, 5).data(), n), 0);
  };

  read_behind_busy_stream([&] { CU_OK(a->prefetch(b, nullptr)); });
  EXPECT_EQ(seen.demand.load(), 0);
  EXPECT_EQ(seen.late.load(), 0) << "late by " << seen.late_ns.load() << " ns";

  // On demand this time: a demand fetch, and nothing waited for it.
  read_behind_busy_stream([] {});
  EXPECT_EQ(seen.demand.load(), 1);
  EXPECT_EQ(seen.demand_waited.load(), 0);
  EXPECT_EQ(seen.late.load(), 0);
  a->set_observer(nullptr);
  CU_OK(cuMemFreeHost(pinned));
  CU_OK(a->free(b->va, nullptr));
  CU_OK(a->free(other->va, nullptr));
}

// A spill leaves its device chunk as a spare; the next fetch of that size
// maps it instead of creating one (counted: fetch_chunks_created), and a
// rescue gives spares back first.
TEST_P(Modes, FetchReusesTheChunkASpillLeftAndTrimReleasesSpares) {
  auto a = make(GetParam());
  const std::size_t n = 16 * MiB;
  Block* b = alloc(*a, n);
  CU_OK(fill(*a, b, nullptr, 9));
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  EXPECT_EQ(a->stats().spare_device_bytes, n);
  drv::reset_counts();
  drv::set_counting(true);
  std::vector<std::uint8_t> back;
  CU_OK(read(*a, b, &back));
  a->drain();
  drv::set_counting(false);
  EXPECT_EQ(drv::calls(drv::Id::cuMemCreate), 0u) << "the fetch created a chunk although a spare fitted";
  EXPECT_EQ(a->stats().fetch_chunks_created, 0u);
  EXPECT_EQ(a->stats().spare_device_bytes, 0u);
  EXPECT_TRUE(back == expected(n, 9));
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  const auto held = simdev_device_bytes_in_use();
  EXPECT_EQ(a->trim(), n);
  EXPECT_EQ(a->stats().spare_device_bytes, 0u);
  EXPECT_EQ(simdev_device_bytes_in_use(), held - n);
  CU_OK(read(*a, b, &back));
  EXPECT_TRUE(back == expected(n, 9));
  EXPECT_EQ(a->stats().fetch_chunks_created, 1u) << "no spare was left: the fetch needed a new chunk";
  CU_OK(a->free(b->va, nullptr));
}

// tierrt's own calls a capture may prohibit (copy mode's pinned pool grows
// with cuMemHostAlloc or cuMemHostRegister) are made in relaxed capture mode:
// a thread-local capture open on the thread that spills (a demand fetch's
// rescue, tierrt_advise) is neither refused nor invalidated by them.
TEST_P(Modes, TierrtsOwnHostAllocationsLeaveTheCallingThreadsCaptureAlone) {
  auto a = make(GetParam());
  Block* b = alloc(*a, 8 * MiB);
  CU_OK(fill(*a, b, nullptr, 12));
  CU_OK(cuStreamSynchronize(nullptr));
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  const std::uint64_t pool_before = a->stats().pinned_pool_bytes;
  EXPECT_EQ(a->spill(b), SpillResult::Started);
  const bool grew = a->stats().pinned_pool_bytes > pool_before;
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS) << "tierrt's own call ended the application's capture";
  if (g != nullptr) CU_OK(cuGraphDestroy(g));
  if (GetParam().mode == SpillMode::Copy) {
    EXPECT_TRUE(grew) << "the spill did not grow the pinned pool";
  }
  a->drain();
  std::vector<std::uint8_t> back;
  CU_OK(read(*a, b, &back));
  EXPECT_TRUE(back == expected(8 * MiB, 12));
  CU_OK(a->free(b->va, nullptr));
  CU_OK(cuStreamDestroy(s));
}

// Invariant: nothing is spilled or fetched while a stream that touches the
// block is capturing; allocations made under capture pass through.
TEST_P(Modes, InvariantNothingMovesUnderStreamCapture) {
  auto a = make(GetParam());
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  Block* b = alloc(*a, 4 * MiB, s);
  CU_OK(fill(*a, b, s, 3));
  CU_OK(cuStreamSynchronize(s));
  CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_EQ(a->spill(b), SpillResult::Busy);
  EXPECT_EQ(b->st(), State::Resident);
  // A block named by captured work stays resident for good.
  Block* bs[1] = {b};
  CU_OK(a->record_use(bs, s, /*capturing=*/true));
  CUdeviceptr raw = 0;
  const auto dev_allocs = a->stats().driver_allocs;
  CU_OK(a->allocate(&raw, 4 * MiB, s, AllocFlags{.pass_through = true}));
  EXPECT_EQ(a->lookup(raw), nullptr);  // not a block: passed through
  EXPECT_EQ(a->stats().driver_allocs, dev_allocs);
  CUgraph g = nullptr;
  CU_OK(cuStreamEndCapture(s, &g));
  EXPECT_EQ(a->spill(b), SpillResult::Busy);
  CU_OK(a->free(raw, s));
  CU_OK(a->free(b->va, s));
  // A fresh block whose stream captured nothing spills normally.
  Block* c = alloc(*a, 4 * MiB, s);
  CU_OK(fill(*a, c, s, 4));
  EXPECT_EQ(a->spill(c), SpillResult::Started);
  a->drain();
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, c, &got, s));
  EXPECT_EQ(got, expected(4 * MiB, 4));
  CU_OK(a->free(c->va, s));
  CU_OK(cuStreamDestroy(s));
}

// Invariant: when the host tier is full, spilling stops (the job goes on).
TEST_P(Modes, InvariantFullHostBudgetStopsSpillingWithoutFailing) {
  Options o;
  o.host_budget = 24 * MiB;
  o.pinned_chunk = 8 * MiB;
  auto a = make(GetParam(), o);
  std::vector<Block*> bs;
  for (int i = 0; i < 8; ++i) {
    bs.push_back(alloc(*a, 4 * MiB));
    CU_OK(fill(*a, bs.back(), nullptr, 100 + i));
  }
  int started = 0, full = 0;
  for (Block* b : bs) {
    const SpillResult r = a->spill(b);
    if (r == SpillResult::Started) ++started;
    if (r == SpillResult::HostFull) ++full;
  }
  a->drain();
  EXPECT_GE(started, 1);
  EXPECT_GT(full, 0);
  EXPECT_LE(a->stats().host_used, 24 * MiB);
  // The application keeps working: allocations, uses, and every byte intact.
  Block* more = alloc(*a, 4 * MiB);
  CU_OK(fill(*a, more, nullptr, 99));
  for (int i = 0; i < 8; ++i) {
    std::vector<std::uint8_t> got;
    CU_OK(read(*a, bs[i], &got));
    EXPECT_EQ(got, expected(4 * MiB, 100 + i)) << i;
  }
  for (Block* b : bs) CU_OK(a->free(b->va, nullptr));
  CU_OK(a->free(more->va, nullptr));
}

// Invariant: when a device allocation fails, the runtime spills what it can
// and retries before reporting OOM. Idle blocks adding up to three times the
// device all fit, and keep their bytes.
TEST_P(Modes, InvariantOomRescueSpillsIdleBlocks) {
  CUdevice d = Env::get().dev;
  std::size_t total = 0;
  CU_OK(cuDeviceTotalMem(&total, d));
  Options o;
  o.device_budget = total;  // let the driver's OOM drive the rescue too
  auto a = make(GetParam(), o);
  const std::size_t n = 16 * MiB;
  const std::size_t count = 3 * total / n;
  std::vector<Block*> bs;
  for (std::size_t i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    ASSERT_EQ(a->allocate(&p, n, nullptr), CUDA_SUCCESS) << "allocation " << i << " of " << count;
    bs.push_back(a->lookup(p));
    CU_OK(fill(*a, bs.back(), nullptr, 1000 + i));
  }
  const Stats st = a->stats();
  EXPECT_GT(st.spills, 0u);
  EXPECT_LE(st.device_peak, total);
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<std::uint8_t> got;
    ASSERT_EQ(read(*a, bs[i], &got), CUDA_SUCCESS) << i;
    ASSERT_EQ(got, expected(n, 1000 + i)) << i;
  }
  for (Block* b : bs) CU_OK(a->free(b->va, nullptr));
  CU_OK(cuCtxSynchronize());
}

// A step that allocates and frees the same sizes reaches the driver only in
// its first iteration.
TEST_P(Modes, CacheSteadyStateCallsNoDriverFunction) {
  auto a = make(GetParam());
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const std::size_t sizes[] = {MiB, 5 * MiB, 64 * MiB, 3 * MiB + 5, 700, 4096, 200000};
  std::uint64_t first = 0;
  for (int step = 0; step < 20; ++step) {
    drv::reset_counts();
    drv::set_counting(true);
    std::vector<CUdeviceptr> ps;
    for (std::size_t n : sizes) {
      CUdeviceptr p = 0;
      ASSERT_EQ(a->allocate(&p, n, s), CUDA_SUCCESS);
      ps.push_back(p);
    }
    for (auto it = ps.rbegin(); it != ps.rend(); ++it) ASSERT_EQ(a->free(*it, s), CUDA_SUCCESS);
    drv::set_counting(false);
    if (step == 0) {
      first = drv::total_calls();
      EXPECT_GT(first, 0u);
    } else {
      EXPECT_EQ(drv::total_calls(), 0u) << "step " << step;
    }
  }
  const Stats st = a->stats();
  EXPECT_EQ(st.allocs, 20u * std::size(sizes));
  EXPECT_LE(st.driver_allocs, std::size(sizes));
  CU_OK(cuStreamDestroy(s));
}

TEST_P(Modes, CacheReuseOnAnotherStreamWaitsForUsesThere) {
  auto a = make(GetParam());
  CUstream s1, s2;
  CU_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  Block* b = alloc(*a, 8 * MiB, s1);
  const CUdeviceptr va = b->va;
  CU_OK(fill(*a, b, s1, 5, /*slow=*/true));  // a use still running when freed
  CU_OK(a->free(va, s1));
  CUdeviceptr p = 0;
  CU_OK(a->allocate(&p, 8 * MiB, s2));
  EXPECT_EQ(p, va);  // the cached block
  // Work on s2 runs after the slow fill: it overwrites, not the other way round.
  Block* c = a->lookup(p);
  CU_OK(fill(*a, c, s2, 6));
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, c, &got, s2));
  EXPECT_EQ(got, expected(8 * MiB, 6));
  CU_OK(a->free(p, s2));
  CU_OK(cuCtxSynchronize());
  CU_OK(cuStreamDestroy(s1));
  CU_OK(cuStreamDestroy(s2));
}

// Found by scripts/soak: a launch on one thread names a block (a stale
// word) and pins it; another thread frees the block (it goes to the cache)
// and a third trims the cache. The trim must not unmap the block under the
// launch still enqueuing, nor recycle it before the launch recorded its use.
TEST_P(Modes, TrimKeepsACachedBlockALaunchStillPins) {
  auto a = make(GetParam());
  Block* b = alloc(*a, 8 * MiB);
  const CUdeviceptr va = b->va;
  Block* one[] = {b};
  CU_OK(a->ensure_resident(one, nullptr));  // the launch, before the free
  CU_OK(a->free(va, nullptr));              // another thread's free: cached
  EXPECT_EQ(a->stats().cached_blocks, 1u);
  a->trim();
  EXPECT_EQ(a->stats().cached_blocks, 1u) << "the cache gave up a block a launch pins";
  EXPECT_TRUE(a->owns(va)) << "the VA was unmapped under the launch";
  CU_OK(a->record_use(one, nullptr));  // the launch went out
  a->release(one);
  EXPECT_EQ(a->stats().cached_blocks, 1u);
  a->trim();  // its use is over once the trim waited for it
  EXPECT_EQ(a->stats().cached_blocks, 0u);
  EXPECT_FALSE(a->owns(va));
}

// A launch whose blocks are all resident is announced rather than pinned
// (launch_announcements.h): it holds them all the same. A spill started
// meanwhile comes back busy, a trim keeps a freed block it names, and both
// go ahead once it is released. A launch nested in it (another engine's),
// or naming a block not resident, pins.
TEST_P(Modes, AnAnnouncedLaunchHoldsItsBlocksAsAPinDoes) {
  auto a = make(GetParam());
  Block* b = alloc(*a, 8 * MiB);
  Block* freed = alloc(*a, 4 * MiB);
  Block* spilled = alloc(*a, 4 * MiB);
  CU_OK(fill(*a, b, nullptr, 21));
  ASSERT_EQ(a->spill(spilled), SpillResult::Started);
  a->drain();
  Block* both[] = {b, freed};
  bool announced = false;
  CU_OK(a->ensure_resident_briefly(both, nullptr, &announced));
  ASSERT_TRUE(announced);
  EXPECT_EQ(b->pins.load(), 0u);
  SpillResult from_other = SpillResult::Started;
  std::thread([&] {
    Env::get().bind();
    from_other = a->spill(b);
  }).join();
  EXPECT_EQ(from_other, SpillResult::Busy) << "a spill took a block from under an announced launch";
  EXPECT_EQ(a->spill(b), SpillResult::Busy);
  const CUdeviceptr freed_va = freed->va;
  CU_OK(a->free(freed_va, nullptr));  // another thread's free: cached
  a->trim();
  EXPECT_TRUE(a->owns(freed_va)) << "the VA was unmapped under the announced launch";
  // Nested: pinned. Not resident: pinned (and fetched).
  Block* again[] = {b};
  bool nested = true;
  CU_OK(a->ensure_resident_briefly(again, nullptr, &nested));
  EXPECT_FALSE(nested);
  EXPECT_EQ(b->pins.load(), 1u);
  a->release(again, nested);
  CU_OK(a->record_use(both, nullptr));
  a->release(both, announced);
  Block* away[] = {spilled};
  bool fetched_announced = true;
  std::thread([&] {
    Env::get().bind();
    CU_OK(a->ensure_resident_briefly(away, nullptr, &fetched_announced));
    EXPECT_EQ(spilled->pins.load(), 1u);
    a->release(away, fetched_announced);
  }).join();
  EXPECT_FALSE(fetched_announced);
  a->trim();
  EXPECT_FALSE(a->owns(freed_va));
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  std::vector<std::uint8_t> back;
  CU_OK(read(*a, b, &back));
  EXPECT_TRUE(back == expected(8 * MiB, 21));
  CU_OK(a->free(b->va, nullptr));
  CU_OK(a->free(spilled->va, nullptr));
}

// Found by scripts/soak: the mover sets a block SPILLED and only then ends
// the move; a free in between destroyed the block under the mover, whose
// move's end then landed on the recycled block. Frees each block the moment
// it reads SPILLED, many times, to land in that window.
TEST_P(Modes, FreeAsASpillLandsWaitsForTheMoverToLetGo) {
  auto a = make(GetParam());
  for (int i = 0; i < 400; ++i) {
    Block* b = alloc(*a, 2 * MiB);
    const CUdeviceptr va = b->va;
    ASSERT_EQ(a->spill(b), SpillResult::Started) << i;
    while (b->st() != State::Spilled) {
    }
    CU_OK(a->free(va, nullptr));
  }
  a->drain();
  const Stats s = a->stats();
  EXPECT_EQ(s.blocks[static_cast<int>(State::Spilled)], 0u);
  EXPECT_EQ(s.spills_done, 400u);
}

// A trim takes a cached block once its own uses are done, not once the
// context is idle: work the application queued elsewhere (a backward pass
// enqueued far ahead of the device) keeps running, and the memory is free
// as soon as its last user finished. The other stream's kernel is held by
// the late gate, so a trim that synchronized the context would not return
// before it opened (the gate gives up after 10 s and the test fails).
TEST_P(Modes, TrimWaitsForTheCachedBlocksUsesNotTheContext) {
  auto a = make(GetParam());
  CUstream busy = nullptr;
  CU_OK(cuStreamCreate(&busy, CU_STREAM_NON_BLOCKING));
  Block* freed = alloc(*a, 8 * MiB);
  Block* other = alloc(*a, 8 * MiB);
  const CUdeviceptr freed_va = freed->va;
  CU_OK(fill(*a, freed, nullptr, 7));
  CU_OK(cuStreamSynchronize(nullptr));
  CU_OK(a->free(freed_va, nullptr));
  late_gate().store(false);
  Block* held[] = {other};
  CU_OK(use_blocks(*a, held, busy, [&] {
    return launch3(Env::get().k.fill_late, busy, other->va, other->size, 9);
  }));
  EXPECT_EQ(a->trim(8 * MiB), 8 * MiB);
  EXPECT_FALSE(a->owns(freed_va));
  EXPECT_EQ(cuStreamQuery(busy), CUDA_ERROR_NOT_READY) << "the trim waited for unrelated work";
  late_gate().store(true);
  CU_OK(cuStreamSynchronize(busy));
  CU_OK(a->free(other->va, nullptr));
  CU_OK(cuStreamDestroy(busy));
}

TEST_P(Modes, TrimReturnsCachedMemory) {
  auto a = make(GetParam());
  const auto base = simdev_device_bytes_in_use();
  Block* b = alloc(*a, 32 * MiB);
  CU_OK(a->free(b->va, nullptr));
  EXPECT_EQ(a->stats().cached_bytes, 32 * MiB);
  EXPECT_EQ(a->trim(), 32 * MiB);
  EXPECT_EQ(a->stats().cached_bytes, 0u);
  EXPECT_EQ(simdev_device_bytes_in_use(), base);
}

TEST_P(Modes, LookupResolvesInteriorPointersAndSlabsAreNotBlocks) {
  auto a = make(GetParam());
  Block* b = alloc(*a, 5 * MiB);
  EXPECT_EQ(a->lookup(b->va + 5 * MiB - 1), b);
  EXPECT_EQ(a->lookup(b->va + 12345), b);
  EXPECT_EQ(a->lookup(b->va - 1), nullptr);
  std::vector<CUdeviceptr> small;
  for (int i = 0; i < 300; ++i) {
    CUdeviceptr p = 0;
    CU_OK(a->allocate(&p, 100 + i * 37, nullptr));
    EXPECT_TRUE(a->owns(p));
    EXPECT_EQ(a->lookup(p), nullptr);
    small.push_back(p);
  }
  std::sort(small.begin(), small.end());
  EXPECT_EQ(std::adjacent_find(small.begin(), small.end()), small.end());
  // Small allocations hold data like any other.
  std::vector<std::uint8_t> in(1000, 0xab), out(1000);
  CU_OK(cuMemcpyHtoD(small[10], in.data(), 500));
  CU_OK(cuMemcpyDtoH(out.data(), small[10], 500));
  EXPECT_EQ(std::memcmp(in.data(), out.data(), 500), 0);
  for (CUdeviceptr p : small) CU_OK(a->free(p, nullptr));
  EXPECT_GT(a->stats().slab_bytes, 0u);
  EXPECT_EQ(a->spill(b), SpillResult::Started);
  // The address, not the Block: a spill that landed before the free lets the
  // free destroy the block, whose object may then be reused (its va zeroed).
  const CUdeviceptr va = b->va;
  CU_OK(a->free(va, nullptr));  // freeing a spilling block is fine
  EXPECT_EQ(a->free(va, nullptr), CUDA_ERROR_INVALID_VALUE);  // double free
  a->drain();
}

TEST_P(Modes, StatsCountBytesPerState) {
  auto a = make(GetParam());
  Block* b = alloc(*a, 2 * MiB);
  Block* c = alloc(*a, 4 * MiB);
  const Allocator::ClassTag tag[] = {{c->va, 3}};
  a->set_classes(tag);
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  Stats s = a->stats();
  EXPECT_EQ(s.bytes[static_cast<int>(State::Spilled)], 2 * MiB);
  EXPECT_EQ(s.bytes[static_cast<int>(State::Resident)], 4 * MiB);
  EXPECT_EQ(s.class_bytes[3], 4 * MiB);
  EXPECT_EQ(s.class_bytes[0], 2 * MiB);
  EXPECT_EQ(s.spills, 1u);
  CU_OK(a->free(c->va, nullptr));
  s = a->stats();
  EXPECT_EQ(s.bytes[static_cast<int>(State::Freed)], 4 * MiB);
  EXPECT_EQ(s.class_bytes[3], 0u);
  CU_OK(a->free(b->va, nullptr));
}

// The planner's tags at a step's end, by address: each block starting at
// one gets its class (set again, it stays counted once); an address inside
// a block, or where no block starts, names nothing.
TEST_P(Modes, ClassesSetByAddressCountEachBlockOnce) {
  auto a = make(GetParam());
  Block* b = alloc(*a, 2 * MiB);
  Block* c = alloc(*a, 4 * MiB);
  const Allocator::ClassTag tags[] = {{b->va, 2}, {c->va, 3}, {c->va + 2 * MiB, 5}, {0x1000, 4}};
  a->set_classes(tags);
  a->set_classes(tags);
  const Stats s = a->stats();
  EXPECT_EQ(s.class_bytes[2], 2 * MiB);
  EXPECT_EQ(s.class_bytes[3], 4 * MiB);
  EXPECT_EQ(s.class_bytes[4] + s.class_bytes[5] + s.class_bytes[0], 0u);
  EXPECT_EQ(b->lifetime.load(), 2);
  EXPECT_EQ(c->lifetime.load(), 3);
  CU_OK(a->free(b->va, nullptr));
  CU_OK(a->free(c->va, nullptr));
  EXPECT_EQ(a->stats().class_bytes[2] + a->stats().class_bytes[3], 0u);
}

// Many streams on one block: more than the use slots hold.
TEST_P(Modes, UsesFromManyStreamsAreAllWaitedFor) {
  auto a = make(GetParam());
  Block* b = alloc(*a, 4 * MiB);
  std::vector<CUstream> ss(12);
  for (auto& s : ss) CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (std::size_t i = 0; i < ss.size(); ++i) {
    if (i) {  // each write is ordered after the previous one, as an application would
      CUevent e;
      CU_OK(cuEventCreate(&e, 0));
      CU_OK(cuEventRecord(e, ss[i - 1]));
      CU_OK(cuStreamWaitEvent(ss[i], e, 0));
      CU_OK(cuEventDestroy(e));
    }
    CU_OK(fill(*a, b, ss[i], 500 + i, /*slow=*/i + 1 == ss.size()));
  }
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, b, &got, ss.back()));
  EXPECT_EQ(got, expected(4 * MiB, 500 + ss.size() - 1));
  CU_OK(a->free(b->va, ss.back()));
  CU_OK(cuCtxSynchronize());
  for (auto& s : ss) CU_OK(cuStreamDestroy(s));
}

// User pins (tierrt_advise PIN / UNPIN) have their own count: a pinned block
// is made resident and is not spilled until unpinned.
TEST_P(Modes, UserPinKeepsABlockResidentUntilUnpinned) {
  auto a = make(GetParam());
  Block* b = alloc(*a, 8 * MiB);
  CU_OK(fill(*a, b, nullptr, 11));
  ASSERT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  ASSERT_EQ(b->st(), State::Spilled);
  CU_OK(a->pin(b, nullptr));  // fetched for the work enqueued next
  a->drain();
  EXPECT_EQ(b->st(), State::Resident);
  EXPECT_EQ(b->pins.load(), 0u);  // no launch pin left behind
  EXPECT_EQ(a->spill(b), SpillResult::Busy);
  CU_OK(a->pin(b, nullptr));  // user pins nest
  EXPECT_TRUE(a->unpin(b));
  EXPECT_EQ(a->spill(b), SpillResult::Busy);
  EXPECT_TRUE(a->unpin(b));
  EXPECT_FALSE(a->unpin(b));  // none left
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, b, &got));
  EXPECT_EQ(got, expected(8 * MiB, 11));
  EXPECT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  CU_OK(a->free(b->va, nullptr));
}

// An unpin without a user pin fails, and cannot release a launch's pin.
TEST_P(Modes, UnpinWithoutAPinCannotReleaseALaunchPin) {
  auto a = make(GetParam());
  Block* b = alloc(*a, 4 * MiB);
  Block* bs[1] = {b};
  CU_OK(a->ensure_resident(bs, nullptr));  // a launch being enqueued
  EXPECT_FALSE(a->unpin(b));
  EXPECT_EQ(b->pins.load(), 1u);
  EXPECT_EQ(a->spill(b), SpillResult::Busy);  // the launch's pin still holds
  a->release(bs);
  EXPECT_EQ(a->spill(b), SpillResult::Started);
  a->drain();
  CU_OK(a->free(b->va, nullptr));
}

// The rescue waits for what can free memory: here the only candidate is
// pinned by a launch another thread is enqueueing. Once that pin is
// released, the allocation spills the block and succeeds.
TEST_P(Modes, RescueWaitsForALaunchPinToBeReleased) {
  Options o;
  o.device_budget = 64 * MiB;
  auto a = make(GetParam(), o);
  Block* held = alloc(*a, 48 * MiB);
  CU_OK(fill(*a, held, nullptr, 21));
  Block* bs[1] = {held};
  CU_OK(a->ensure_resident(bs, nullptr));
  std::atomic<bool> released{false};
  std::thread launch([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    released = true;
    a->release(bs);
  });
  CUdeviceptr p = 0;
  EXPECT_EQ(a->allocate(&p, 32 * MiB, nullptr), CUDA_SUCCESS);
  EXPECT_TRUE(released.load());  // it waited for the pin instead of failing
  launch.join();
  a->drain();
  EXPECT_EQ(held->st(), State::Spilled);
  CU_OK(a->free(p, nullptr));
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, held, &got));
  EXPECT_EQ(got, expected(48 * MiB, 21));
  CU_OK(a->free(held->va, nullptr));
}

// The same for a launch announced rather than pinned: its thread lets go
// soon, so the rescue waits for it instead of passing the budget.
TEST_P(Modes, RescueWaitsForAnAnnouncedLaunchToEnd) {
  Options o;
  o.device_budget = 64 * MiB;
  auto a = make(GetParam(), o);
  Block* held = alloc(*a, 48 * MiB);
  CU_OK(fill(*a, held, nullptr, 22));
  CU_OK(cuStreamSynchronize(nullptr));
  Block* bs[1] = {held};
  std::atomic<int> phase{0};
  std::atomic<bool> ended{false};
  std::thread launch([&] {
    Env::get().bind();
    bool announced = false;
    CU_OK(a->ensure_resident_briefly(bs, nullptr, &announced));
    EXPECT_TRUE(announced);
    phase = 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CU_OK(a->record_use(bs, nullptr));
    ended = true;
    a->release(bs, announced);
  });
  while (phase.load() == 0) std::this_thread::yield();
  CUdeviceptr p = 0;
  EXPECT_EQ(a->allocate(&p, 32 * MiB, nullptr), CUDA_SUCCESS);
  EXPECT_TRUE(ended.load()) << "the rescue did not wait for the announced launch";
  launch.join();
  a->drain();
  EXPECT_EQ(held->st(), State::Spilled);
  EXPECT_EQ(a->stats().over_budget, 0u);
  CU_OK(a->free(p, nullptr));
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, held, &got));
  EXPECT_EQ(got, expected(48 * MiB, 22));
  CU_OK(a->free(held->va, nullptr));
}

// ...and stops waiting at once when nothing can change: the only candidate
// is pinned by the very launch that needs the memory. The budget is a
// target, not a cap: with the device far from full the launch goes ahead
// over the budget, in both modes, and that is counted. (Where the device
// itself is full, budget_target_test.cpp.)
TEST_P(Modes, RescueGoesOverTheBudgetAtOnceWhenOnlyTheLaunchItselfPinsTheCandidates) {
  Options o;
  o.device_budget = 64 * MiB;
  auto a = make(GetParam(), o);
  Block* y = alloc(*a, 20 * MiB);
  CU_OK(fill(*a, y, nullptr, 5));
  ASSERT_EQ(a->spill(y), SpillResult::Started);
  a->drain();
  a->trim();  // no spare chunk left for y's fetch
  Block* x = alloc(*a, 48 * MiB);
  Block* launch[2] = {x, y};
  const auto t0 = std::chrono::steady_clock::now();
  const CUresult r = a->ensure_resident(launch, nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(r, CUDA_SUCCESS);
  EXPECT_NE(y->st(), State::Spilled);
  const Stats st = a->stats();
  EXPECT_EQ(st.over_budget, 1u);
  EXPECT_EQ(st.device_used, 68 * MiB);
  if (r == CUDA_SUCCESS) a->release(launch);
  EXPECT_EQ(x->st(), State::Resident);
  CU_OK(a->free(x->va, nullptr));
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, y, &got));
  EXPECT_EQ(got, expected(20 * MiB, 5));
  CU_OK(a->free(y->va, nullptr));
}

INSTANTIATE_TEST_SUITE_P(Allocator, Modes, every_mode_param(), mode_param_name);

// Lazy use events (use_tracker.h) where the stream they wait on is special.
class LazyUses : public ::testing::TestWithParam<SpillMode> {
 protected:
  // No launch records the stream's open event itself: only a settle does.
  std::unique_ptr<Allocator> make_lazy() {
    Options o;
    o.lazy_use_window_ns = UINT64_MAX;
    return make(GetParam(), o);
  }
  // Spills b while a late kernel that fills it with pattern(seed) is held
  // at the gate (opened 100 ms later), then reads it back: the spill's copy
  // must have waited for the kernel.
  static void spill_while_held_then_check(Allocator& a, Block* b, CUstream s, std::uint64_t seed) {
    std::thread opener([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      late_gate() = true;
    });
    ASSERT_EQ(a.spill(b), SpillResult::Started);
    a.drain();
    opener.join();
    std::vector<std::uint8_t> back;
    CU_OK(read(a, b, &back, s));
    EXPECT_TRUE(back == expected(b->size, seed)) << "the spill copied the block before the use wrote it";
  }
  // Fills b (at the end of a late kernel) on s, recording the use lazily.
  static CUresult fill_late_lazily(Allocator& a, Block* b, CUstream s, std::uint64_t seed) {
    Block* bs[1] = {b};
    CUresult r = a.ensure_resident(bs, s);
    if (r != CUDA_SUCCESS) return r;
    r = launch3(Env::get().k.fill_late, s, b->va, b->size, seed);
    if (r == CUDA_SUCCESS) r = a.record_use(bs, s, /*capturing=*/false, /*lazy=*/true);
    a.release(bs);
    return r;
  }
};

// A lazy use on the legacy stream is settled while a blocking stream
// captures: recorded on the legacy stream itself, the event would make it
// depend on the capturing stream, which ends that capture. The block freed
// and handed out again on another stream is written there only after the
// use.
TEST_P(LazyUses, ALegacyStreamUseSettledDuringACaptureLeavesTheCaptureAlone) {
  auto a = make_lazy();
  Block* b = alloc(*a, 8 * MiB);
  const CUdeviceptr va = b->va;
  CUstream blocking, s2;
  CU_OK(cuStreamCreate(&blocking, 0));
  CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  late_gate() = false;
  CU_OK(fill_late_lazily(*a, b, CU_STREAM_LEGACY, 31));
  CU_OK(cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU_OK(a->free(va, s2));
  CUdeviceptr p = 0;
  const CUresult got_memory = a->allocate(&p, 8 * MiB, s2);  // settles the use: s2 waits for it
  CUgraph g = nullptr;
  const CUresult ended = cuStreamEndCapture(blocking, &g);
  late_gate() = true;
  CU_OK(got_memory);
  EXPECT_EQ(ended, CUDA_SUCCESS) << "settling a legacy-stream use ended a capture";
  if (g != nullptr) CU_OK(cuGraphDestroy(g));
  ASSERT_EQ(p, va);  // the cached block
  Block* c = a->lookup(p);
  CU_OK(fill(*a, c, s2, 32));
  std::vector<std::uint8_t> bytes;
  CU_OK(read(*a, c, &bytes, s2));
  EXPECT_EQ(bytes, expected(8 * MiB, 32)) << "the new owner's write ran before the old use";
  const Stats st = a->stats();
  EXPECT_EQ(st.lazy_uses, 1u);
  CU_OK(a->free(p, s2));
  CU_OK(cuCtxSynchronize());
  CU_OK(cuStreamDestroy(blocking));
  CU_OK(cuStreamDestroy(s2));
}

// Lazy uses whose blocks hold their stream's open event already take no
// lock and store nothing (use_tracker.h). Once that event was recorded, the
// next use is not covered by it: it is stored with a new open event, and a
// spill's copy waits for it (the late kernel's bytes are what goes to the
// host and comes back).
TEST_P(LazyUses, AUseAfterItsStreamsOpenEventWasRecordedIsWaitedFor) {
  auto a = make_lazy();
  Block* b = alloc(*a, 8 * MiB);
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (std::uint64_t seed = 40; seed < 43; ++seed) CU_OK(fill_late_lazily(*a, b, s, seed));
  EXPECT_EQ(a->stats().lazy_uses, 3u);
  EXPECT_EQ(a->stats().lazy_uses_unlocked, 2u) << "the 2nd and 3rd use found the open event stored";
  CU_OK(cuStreamSynchronize(s));
  a->flush_uses(s);  // the open event is recorded
  late_gate() = false;
  CU_OK(fill_late_lazily(*a, b, s, 43));  // held at the gate
  EXPECT_EQ(a->stats().lazy_uses_unlocked, 2u) << "a use rode on an event recorded before it";
  spill_while_held_then_check(*a, b, s, 43);
  CU_OK(a->free(b->va, s));
  CU_OK(cuStreamSynchronize(s));
  CU_OK(cuStreamDestroy(s));
}

// A stream destroyed with a use still open: the event is recorded on it
// before it goes (Allocator::flush_uses), so that handing the block out again
// elsewhere waits on the device, and never on a stream made later with its
// handle.
TEST_P(LazyUses, AStreamDestroyedWithAnOpenUseIsWaitedForOnTheDevice) {
  auto a = make_lazy();
  Block* b = alloc(*a, 8 * MiB);
  const CUdeviceptr va = b->va;
  late_gate() = false;
  CUstream s;
  CUevent fill_done;
  CU_OK(cuEventCreate(&fill_done, CU_EVENT_DISABLE_TIMING));
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU_OK(fill_late_lazily(*a, b, s, 47));
  CU_OK(cuEventRecord(fill_done, s));
  a->flush_uses(s, /*stream_destroyed=*/true);
  CU_OK(cuStreamDestroy(s));
  std::vector<CUstream> later(4);
  for (CUstream& l : later) CU_OK(cuStreamCreate(&l, CU_STREAM_NON_BLOCKING));
  CU_OK(a->free(va, later[0]));
  CUdeviceptr p = 0;
  const CUresult got_memory = a->allocate(&p, 8 * MiB, later[1]);
  const CUresult fill_state = cuEventQuery(fill_done);
  late_gate() = true;
  CU_OK(got_memory);
  EXPECT_EQ(fill_state, CUDA_ERROR_NOT_READY) << "the allocation waited on the host for the old use";
  ASSERT_EQ(p, va);
  Block* c = a->lookup(p);
  CU_OK(fill(*a, c, later[1], 48));
  std::vector<std::uint8_t> bytes;
  CU_OK(read(*a, c, &bytes, later[1]));
  EXPECT_EQ(bytes, expected(8 * MiB, 48)) << "the new owner's write ran before the old use";
  CU_OK(a->free(p, later[1]));
  CU_OK(cuCtxSynchronize());
  CU_OK(cuEventDestroy(fill_done));
  for (CUstream l : later) CU_OK(cuStreamDestroy(l));
}

// Where a background thread records aged open events (the policy thread,
// use_tracker.h), a launch after the window leaves the record to it, until
// kLauncherWindows windows passed; the background record is a record all
// the same: a spill's copy waits for the late kernel it covers.
TEST_P(LazyUses, AnAgedOpenEventIsRecordedInTheBackgroundNotByTheLaunch) {
  Options o;
  o.lazy_use_window_ns = 100'000'000;  // 100 ms: a loaded machine's sleeps overshoot
  auto a = make(GetParam(), o);
  a->set_background_use_records(true);
  Block* b = alloc(*a, 8 * MiB);
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU_OK(fill_late_lazily(*a, b, s, 50));  // opens the stream's event
  const std::uint64_t events = a->stats().use_events;
  std::this_thread::sleep_for(std::chrono::milliseconds(120));  // one window, not four
  late_gate() = false;
  CU_OK(fill_late_lazily(*a, b, s, 51));
  EXPECT_EQ(a->stats().use_events, events) << "the launch recorded the aged event itself";
  a->record_aged_uses();
  EXPECT_EQ(a->stats().use_events, events + 1);
  EXPECT_EQ(a->stats().lazy_records_background, 1u);
  spill_while_held_then_check(*a, b, s, 51);
  // Four windows with no background turn: the launch records the event.
  CU_OK(fill_late_lazily(*a, b, s, 52));
  const std::uint64_t before = a->stats().use_events;
  std::this_thread::sleep_for(std::chrono::milliseconds(420));
  CU_OK(fill_late_lazily(*a, b, s, 53));
  EXPECT_EQ(a->stats().use_events, before + 1) << "no record after four windows without a background turn";
  a->set_background_use_records(false);
  CU_OK(a->free(b->va, s));
  CU_OK(cuStreamSynchronize(s));
  CU_OK(cuStreamDestroy(s));
}

// A lazy use points each block's lazy use at its stream's open event, giving
// up the event it held: references are counted once per event, not once per
// block (use_tracker.cpp, repoint). Each event's count is the lazy uses that
// hold it, whatever runs of equal events the blocks held before, and one
// given up by every block is back in the pool.
TEST_P(LazyUses, EachEventCountsTheSlotsThatHoldIt) {
  Options o;
  o.lazy_use_window_ns = 10'000'000'000;  // no record by a launch: the test flushes
  auto a = make(GetParam(), o);
  std::vector<Block*> bs;
  for (int i = 0; i < 8; ++i) bs.push_back(alloc(*a, MiB));
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  auto held = [&](int i) -> UseEvent* { return bs[i]->lazy.load(); };
  // Records `which` lazily, then the open event (which then holds no
  // reference of the stream's): the event they all hold now.
  auto use = [&](std::initializer_list<int> which) {
    std::vector<Block*> named;
    for (int i : which) named.push_back(bs[i]);
    EXPECT_EQ(a->record_use(named, s, /*capturing=*/false, /*lazy=*/true), CUDA_SUCCESS);
    a->flush_uses(s);
    return held(*which.begin());
  };
  auto refs = [](const UseEvent* e) { return e->refs.load(); };
  UseEvent* e1 = use({0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_NE(e1, nullptr);
  EXPECT_EQ(refs(e1), 8);
  UseEvent* e2 = use({0, 1, 2, 3});
  EXPECT_EQ(refs(e2), 4);
  EXPECT_EQ(refs(e1), 4);
  UseEvent* e3 = use({0, 2, 4, 6});  // evens: 0 and 2 give up e2, 4 and 6 e1
  EXPECT_EQ(refs(e3), 4);
  EXPECT_EQ(refs(e2), 2);
  EXPECT_EQ(refs(e1), 2);
  // The slots give up e3, e2, e3, e2, e3, e1, e3, e1: runs of one.
  UseEvent* e4 = use({0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(refs(e4), 8);
  for (const UseEvent* e : {e1, e2, e3}) {
    EXPECT_NE(e, e4);
    EXPECT_EQ(refs(e), 0) << "an event no slot holds is back in the pool";
  }
  for (Block* b : bs) CU_OK(a->free(b->va, s));
  CU_OK(cuStreamSynchronize(s));
  CU_OK(cuStreamDestroy(s));
}

// A block's lazy use is one field (Block::lazy): a lazy use on another
// stream takes it, and the first stream's use moves into the block's slots,
// where a spill's copy still waits for it (the held kernel's bytes are what
// goes to the host and comes back).
TEST_P(LazyUses, AnotherStreamsLazyUseMovesIntoTheSlots) {
  auto a = make_lazy();
  Block* b = alloc(*a, 8 * MiB);
  CUstream s1, s2;
  CU_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  late_gate() = false;
  CU_OK(fill_late_lazily(*a, b, s1, 60));  // held at the gate
  UseEvent* e1 = b->lazy.load();
  ASSERT_NE(e1, nullptr);
  Block* bs[1] = {b};
  CU_OK(a->ensure_resident(bs, s2));
  CU_OK(a->record_use(bs, s2, /*capturing=*/false, /*lazy=*/true));
  a->release(bs);
  EXPECT_NE(b->lazy.load(), e1) << "the use on s2 is the block's lazy use now";
  ASSERT_EQ(b->nuses, 1);
  EXPECT_EQ(b->uses[0].stream, s1);
  EXPECT_EQ(b->uses[0].ev, e1) << "the use on s1 moved into a slot";
  spill_while_held_then_check(*a, b, s1, 60);
  CU_OK(a->free(b->va, s1));
  CU_OK(cuCtxSynchronize());
  CU_OK(cuStreamDestroy(s1));
  CU_OK(cuStreamDestroy(s2));
}

// A block whose 8 slots hold uses of 8 streams gives up its lazy use on a
// ninth (a late kernel held at the gate) to a lazy use on a tenth: the
// launching thread does not wait for the held kernel (the tenth stream
// waits on the device, and a use event recorded there stands for both),
// and a spill's copy still waits for it, checked by its bytes.
TEST_P(LazyUses, ALazyUseMetByFullSlotsIsChainedOnTheDevice) {
  auto a = make_lazy();
  Block* b = alloc(*a, 8 * MiB);
  Block* bs[1] = {b};
  std::vector<CUstream> streams(10);
  for (CUstream& s : streams) CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  late_gate() = false;
  // One pin throughout, so that nothing retires the 8 slots' uses (complete
  // at once: only the held kernel keeps the block busy).
  CU_OK(a->ensure_resident(bs, streams[8]));
  CU_OK(launch3(Env::get().k.fill_late, streams[8], b->va, b->size, 70));
  for (int i = 0; i < 8; ++i) CU_OK(a->record_use(bs, streams[i], /*capturing=*/false, /*lazy=*/false));
  ASSERT_EQ(b->nuses, kMaxUseSlots);
  CU_OK(a->record_use(bs, streams[8], /*capturing=*/false, /*lazy=*/true));
  UseEvent* held = b->lazy.load();
  ASSERT_NE(held, nullptr);
  CU_OK(a->record_use(bs, streams[9], /*capturing=*/false, /*lazy=*/true));
  a->release(bs);
  EXPECT_EQ(cuStreamQuery(streams[8]), CUDA_ERROR_NOT_READY)
      << "the launching thread waited for the held kernel on the host";
  EXPECT_NE(b->lazy.load(), held);
  EXPECT_EQ(b->nuses, kMaxUseSlots);
  spill_while_held_then_check(*a, b, streams[8], 70);
  CU_OK(a->free(b->va, streams[8]));
  CU_OK(cuCtxSynchronize());
  for (CUstream s : streams) CU_OK(cuStreamDestroy(s));
}

// The rescue spills the coldest first (Block::last_use): a block named
// lazily after its stream's open event was recorded and another opened is
// warmer than one named only before, though no event was recorded eagerly.
TEST_P(LazyUses, AUseInALaterOpenEventIsWarmer) {
  auto a = make_lazy();
  Block* older = alloc(*a, MiB);
  Block* newer = alloc(*a, MiB);
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  Block* both[2] = {older, newer};
  CU_OK(a->record_use(both, s, /*capturing=*/false, /*lazy=*/true));
  EXPECT_EQ(older->last_use.load(), newer->last_use.load());
  a->flush_uses(s);
  Block* one[1] = {newer};
  CU_OK(a->record_use(one, s, /*capturing=*/false, /*lazy=*/true));
  EXPECT_GT(newer->last_use.load(), older->last_use.load());
  for (Block* b : both) CU_OK(a->free(b->va, s));
  CU_OK(cuStreamSynchronize(s));
  CU_OK(cuStreamDestroy(s));
}

// Threads record lazy uses of the same blocks on one stream at once while
// another records the stream's open event again and again: each launch
// re-points the blocks' lazy uses without a lock (use_tracker.h). No
// reference is lost or counted twice (each event's count is the lazy uses
// holding it, and the pool still hands out working events), and the last
// launch's event is every block's.
TEST_P(LazyUses, LaunchesRacingOnOneStreamLoseNoUse) {
  auto a = make_lazy();
  std::vector<Block*> bs;
  for (int i = 0; i < 12; ++i) bs.push_back(alloc(*a, MiB));
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::thread recorder([&] {
    Env::get().bind();
    while (!stop.load()) a->flush_uses(s);
  });
  std::vector<std::thread> launchers;
  std::atomic<int> ready{0};
  for (int t = 0; t < 3; ++t)
    launchers.emplace_back([&] {
      Env::get().bind();
      ready.fetch_add(1);
      while (ready.load() < 3) {
      }
      for (int i = 0; i < 40000; ++i) {
        // Overlapping windows of 8 of the 12 blocks.
        std::vector<Block*> named;
        for (int k = 0; k < 8; ++k) named.push_back(bs[(i + k) % bs.size()]);
        if (a->record_use(named, s, /*capturing=*/false, /*lazy=*/true) != CUDA_SUCCESS) failures.fetch_add(1);
      }
    });
  for (std::thread& l : launchers) l.join();
  stop = true;
  recorder.join();
  EXPECT_EQ(failures.load(), 0);
  a->flush_uses(s);  // no open event holds a reference of the stream's now
  // A newer event a racing launch stored and a slower one displaced moved
  // into the block's slots: those hold references too.
  auto holders = [&] {
    std::map<const UseEvent*, int> n;
    for (Block* b : bs) {
      ++n[b->lazy.load()];
      for (int k = 0; k < b->nuses; ++k) ++n[b->uses[k].ev];
    }
    return n;
  };
  const std::map<const UseEvent*, int> raced = holders();
  EXPECT_EQ(raced.count(nullptr), 0u) << "a block lost its lazy use";
  for (const auto& [e, n] : raced) {
    if (e != nullptr) {
      EXPECT_EQ(e->refs.load(), n) << "an event's count is the uses holding it";
    }
  }
  EXPECT_EQ(a->record_use(bs, s, /*capturing=*/false, /*lazy=*/true), CUDA_SUCCESS);
  a->flush_uses(s);
  const UseEvent* last = bs[0]->lazy.load();
  for (Block* b : bs) EXPECT_EQ(b->lazy.load(), last);
  const std::map<const UseEvent*, int> after = holders();
  for (const auto& [e, n] : raced) {
    if (e != last && after.count(e) == 0) {
      EXPECT_EQ(e->refs.load(), 0) << "an event nothing holds is back in the pool";
    }
  }
  for (const auto& [e, n] : after) EXPECT_EQ(e->refs.load(), n);
  for (Block* b : bs) CU_OK(a->free(b->va, s));
  CU_OK(cuStreamSynchronize(s));
  CU_OK(cuStreamDestroy(s));
}

// A launch on s1 re-points a block's lazy use while a launch on s2 names
// the block between its read and its swap (run there by a debug seam):
// the compare and swap sees the use s2 stored and moves it into the slots,
// and the event s1's launch read, which s2's launch moved into the slots,
// keeps its reference there. A load and a store in place of the compare and
// swap drops s2's use and that reference (the race the stress test above
// rarely meets on two cores).
TEST_P(LazyUses, AnotherStreamsLaunchBetweenReadAndSwapKeepsItsUse) {
#ifdef NDEBUG
  GTEST_SKIP() << "the seam is compiled out (NDEBUG)";
#else
  auto a = make_lazy();
  Block* b = alloc(*a, MiB);
  Block* bs[1] = {b};
  CUstream s1, s2;
  CU_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CU_OK(a->record_use(bs, s1, /*capturing=*/false, /*lazy=*/true));
  const UseEvent* first = b->lazy.load();
  ASSERT_NE(first, nullptr);
  a->flush_uses(s1);  // recorded: the next launch on s1 opens a newer event
  static Allocator* racing = nullptr;
  static CUstream racing_stream = nullptr;
  static int seam_calls = 0;
  racing = a.get();
  racing_stream = s2;
  seam_calls = 0;
  UseTracker::between_read_and_swap.store([](Block* named) {
    UseTracker::between_read_and_swap.store(nullptr);  // the launch below passes it by
    ++seam_calls;
    Block* one[1] = {named};
    CU_OK(racing->record_use(one, racing_stream, /*capturing=*/false, /*lazy=*/true));
  });
  CU_OK(a->record_use(bs, s1, /*capturing=*/false, /*lazy=*/true));
  UseTracker::between_read_and_swap.store(nullptr);
  ASSERT_EQ(seam_calls, 1);
  const UseEvent* lazy = b->lazy.load();
  ASSERT_NE(lazy, nullptr);
  EXPECT_EQ(lazy->on, s1) << "the launch that swapped last holds the lazy use";
  EXPECT_NE(lazy, first);
  a->flush_uses(s1);  // no open event holds a reference of its stream's now
  a->flush_uses(s2);
  std::map<const UseEvent*, int> holders;
  ++holders[lazy];
  bool on_s2 = false, first_held = false;
  for (int k = 0; k < b->nuses; ++k) {
    ++holders[b->uses[k].ev];
    on_s2 |= b->uses[k].stream == s2;
    first_held |= b->uses[k].ev == first;
  }
  EXPECT_TRUE(on_s2) << "the use s2's launch stored was lost";
  EXPECT_TRUE(first_held) << "the event s2's launch moved into the slots is gone";
  for (const auto& [e, n] : holders) EXPECT_EQ(e->refs.load(), n) << "an event's count is the uses holding it";
  CU_OK(a->free(b->va, s1));
  CU_OK(cuCtxSynchronize());
  CU_OK(cuStreamDestroy(s1));
  CU_OK(cuStreamDestroy(s2));
#endif
}

INSTANTIATE_TEST_SUITE_P(Allocator, LazyUses, ::testing::Values(SpillMode::Remap, SpillMode::Copy),
                         [](const auto& i) { return i.param == SpillMode::Remap ? "remap" : "copy"; });

// The mover thread could not make the device's context current: it could
// finish no move (each spill would fail and keep its host memory), so the
// allocator does not start and says why.
TEST(AllocatorStart, FailsWhenTheMoverThreadCannotBindTheContext) {
  Env::get().bind();
  ASSERT_EQ(simdev_inject_fault("cuCtxSetCurrent", 1, 0), 0);
  CUresult r = CUDA_SUCCESS;
  auto a = Allocator::create(Options{}, &r);
  simdev_clear_faults();
  EXPECT_EQ(a, nullptr);
  EXPECT_NE(r, CUDA_SUCCESS);
}

TEST(DriverTable, ResolvesVersionedNamesThroughTheRealDlsym) {
  Env::get().bind();
  const drv::Table& t = drv::detail::table();
  ASSERT_TRUE(drv::loaded());
  EXPECT_STREQ(drv::symbol_name(drv::Id::cuMemAlloc), "cuMemAlloc_v2");
  EXPECT_STREQ(drv::symbol_name(drv::Id::cuMemcpyDtoHAsync), "cuMemcpyDtoHAsync_v2");
  EXPECT_EQ(reinterpret_cast<void*>(t.cuMemAlloc), dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
  // The C library's own dlsym/dlopen (not whatever RTLD_DEFAULT finds first:
  // a sanitizer's or a preloaded hook).
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libc, nullptr);
  Dl_info a{}, b{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(drv::real_dlsym()), &a), 0);
  ASSERT_NE(dladdr(reinterpret_cast<void*>(drv::real_dlopen()), &b), 0);
  EXPECT_NE(std::string(a.dli_fname).find("libc.so"), std::string::npos) << a.dli_fname;
  EXPECT_NE(std::string(b.dli_fname).find("libc.so"), std::string::npos) << b.dli_fname;
  EXPECT_STREQ(a.dli_sname, "dlsym");
  EXPECT_STREQ(b.dli_sname, "dlopen");
}

TEST(DriverTable, CallsReturnTheDriversResultAndAreCounted) {
  Env::get().bind();
  EXPECT_STREQ(drv::result_name(CUDA_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
  CUdeviceptr p = 0;
  EXPECT_EQ(TIERRT_CU(cuMemAlloc, &p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_STREQ(drv::result_name(CUDA_ERROR_INVALID_VALUE), "CUDA_ERROR_INVALID_VALUE");
  drv::reset_counts();
  drv::set_counting(true);
  CUdevice d;
  (void)TIERRT_CU(cuCtxGetDevice, &d);
  (void)TIERRT_CU(cuCtxGetDevice, &d);
  drv::set_counting(false);
  (void)TIERRT_CU(cuCtxGetDevice, &d);
  EXPECT_EQ(drv::calls(drv::Id::cuCtxGetDevice), 2u);
  EXPECT_EQ(drv::total_calls(), 2u);
}

TEST(AllocatorPassThrough, ForgottenWhenTheDriverFreesIt) {
  Env::get().bind();
  auto a = Allocator::create(Options{});
  ASSERT_NE(a, nullptr);
  CUdeviceptr p = 0;
  AllocFlags flags;
  flags.pass_through = true;
  ASSERT_EQ(a->allocate(&p, 4096, nullptr, flags), CUDA_SUCCESS);
  EXPECT_FALSE(a->owns(p));
  EXPECT_TRUE(a->forget_pass_through(p));
  EXPECT_FALSE(a->forget_pass_through(p));
  ASSERT_EQ(TIERRT_CU(cuMemFree, p), CUDA_SUCCESS);
  // The allocator going away must not free p a second time.
  drv::reset_counts();
  drv::set_counting(true);
  a.reset();
  drv::set_counting(false);
  EXPECT_EQ(drv::calls(drv::Id::cuMemFree), 0u);
}

TEST(AllocatorAuto, PicksRemapWhereHostVmmWorks) {
  Env::get().bind();
  auto a = Allocator::create(Options{});
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->mode(), SpillMode::Remap);
  EXPECT_EQ(a->granularity(), 2 * MiB);
}


// tierrt's waits for a use with no event ask the use's stream whether it
// captures, then query or synchronize it, or synchronize the context; each
// of those ends a capture it meets (capture_gate.h).

// The application begins and ends captures on a stream while another thread
// polls it: no poll's query lands in a capture begun after its question.
TEST(CaptureGate, APollOfAStreamNeverEndsACaptureBegunMeanwhile) {
  Env::get().bind();
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> polls{0}, refused{0};
  std::thread prober([&] {
    Env::get().bind();
    while (!stop.load()) {
      if (UseTracker::poll_stream(s) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) refused.fetch_add(1);
      polls.fetch_add(1);
    }
  });
  CaptureGate& gate = CaptureGate::process();
  int ended_by_a_probe = 0;
  // Past 3000 captures only until a poll met one open (a loaded machine may
  // not run the prober inside a capture for a long while).
  for (int i = 0; i < 3000 || (refused.load() == 0 && i < 100'000); ++i) {
    CU_OK(gate.begin([&] { return cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED); }));
    std::this_thread::yield();
    CUgraph g = nullptr;
    const CUresult ended = gate.end(s, [&] { return cuStreamEndCapture(s, &g); });
    if (ended != CUDA_SUCCESS) ++ended_by_a_probe;
    if (g != nullptr) CU_OK(cuGraphDestroy(g));
  }
  stop = true;
  prober.join();
  EXPECT_EQ(ended_by_a_probe, 0) << "a poll queried a stream that had begun capturing since it asked";
  EXPECT_GT(refused.load(), 0u) << "no poll met an open capture: the test did not interleave";
  EXPECT_EQ(gate.open_captures(), 0);
  CU_OK(cuStreamDestroy(s));
}

// A use with no event on another thread's per-thread default stream can be
// waited for only by synchronizing the context, which would end every
// capture open in it: while one is, the wait is refused instead, and the
// capture goes on. Once none is open, the context is synchronized.
TEST(CaptureGate, AContextSynchronizeWaitsForNoCaptureAndIsRefusedWhileOneIsOpen) {
  Env::get().bind();
  const CUstream mine = drv::this_thread_stream_key();
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  auto wait_from_another_thread = [&] {
    CUresult r = CUDA_ERROR_UNKNOWN;
    std::thread t([&] {
      Env::get().bind();
      r = UseTracker::wait_host(UseTracker::unrecorded_use(mine));
    });
    t.join();
    return r;
  };
  CaptureGate& gate = CaptureGate::process();
  CU_OK(gate.begin([&] { return cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL); }));
  EXPECT_EQ(wait_from_another_thread(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  EXPECT_EQ(gate.end(s, [&] { return cuStreamEndCapture(s, &g); }), CUDA_SUCCESS)
      << "the wait synchronized the context during the capture";
  EXPECT_EQ(gate.open_captures(), 0);
  if (g != nullptr) CU_OK(cuGraphDestroy(g));
  EXPECT_EQ(wait_from_another_thread(), CUDA_SUCCESS);
  CU_OK(cuStreamDestroy(s));
}

}  // namespace
}  // namespace tierrt::alloc::testing
