// Stream capture under tierrt: captures it did not see begin, side streams
// joined through events, nothing of tierrt's recorded into a capture, moves
// held while a global-mode capture is open, allocations and frees inside a
// capture.
#include <thread>

#include "runtime/capture_tracker.h"
#include "tests/runtime/graph_test_support.h"

namespace tierrt {
namespace {

using testing_graphs::GraphTest;

// A capture begun before tierrt knew of it (here: behind the engine's back,
// as before it started) is found the first time tierrt meets the stream: a
// captured free of a block does not hand its memory to the next allocation,
// and nothing moves until the capture ends (its mode is unknown: global).
TEST_F(GraphTest, ACaptureBegunBeforeTierrtSawItIsFoundThroughTheDriver) {
  const CUdeviceptr a = allocate(kBytes, other_), idle = allocate(kBytes, other_);
  ASSERT_EQ(CUDA_SUCCESS, write(a, 1, other_));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
  CUstream unseen = nullptr;
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamCreate, &unseen, CU_STREAM_NON_BLOCKING));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamBeginCapture, unseen, CU_STREAM_CAPTURE_MODE_RELAXED));

  EXPECT_EQ(CUDA_SUCCESS, free_on(a, unseen));
  const CUdeviceptr b = allocate(kBytes, other_);
  EXPECT_NE(a, b) << "a block freed inside a capture was handed out again before the graph freed it";
  EXPECT_FALSE(advise(idle, TIERRT_ADVISE_SPILL)) << "a block moved while a capture of unknown mode was open";

  CUgraph g = end(unseen);
  EXPECT_FALSE(e_->capturing(unseen));
  EXPECT_TRUE(spills_soon(idle)) << "moves stayed held after the capture ended";
  CUgraphExec exec = instantiate(g);
  EXPECT_EQ(CUDA_SUCCESS, launch_graph(exec, unseen));
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamSynchronize, unseen));
  EXPECT_FALSE(advise(a, TIERRT_ADVISE_PIN)) << "the graph's launch did not free the block";
  destroy(g, exec);
  // `unseen` is kept: a stream created later at its address would be one
  // tierrt has met already.
  EXPECT_EQ(CUDA_SUCCESS, free_now(b));
  EXPECT_EQ(CUDA_SUCCESS, free_now(idle));
}

// cuEventRecord on a capturing stream, then cuStreamWaitEvent on another:
// the other stream captures into the same graph until the capture ends.
TEST_F(GraphTest, ASideStreamJoinedThroughAnEventCaptures) {
  const CUdeviceptr a = allocate(kBytes, other_);
  CUevent ev = nullptr;
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuEventCreate, &ev, CU_EVENT_DISABLE_TIMING));
  ASSERT_EQ(CUDA_SUCCESS, begin(s_, CU_STREAM_CAPTURE_MODE_RELAXED));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuEventRecord, ev, s_));
  e_->note_event_record(ev, s_);
  EXPECT_FALSE(e_->capturing(other_));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamWaitEvent, other_, ev, 0u));
  e_->note_stream_wait(other_, ev);
  EXPECT_TRUE(e_->capturing(other_)) << "a stream joined to a capture through an event is not seen capturing";

  EXPECT_EQ(CUDA_SUCCESS, free_on(a, other_));
  const CUdeviceptr b = allocate(kBytes, nullptr);
  EXPECT_NE(a, b) << "a block freed on a joined side stream was handed out again";
  // The side stream joins back before the capture ends, as the driver asks.
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuEventRecord, ev, other_));
  e_->note_event_record(ev, other_);
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuStreamWaitEvent, s_, ev, 0u));
  e_->note_stream_wait(s_, ev);
  CUgraph g = end(s_);
  EXPECT_FALSE(e_->capturing(other_)) << "a side stream kept capturing after its capture ended";
  // An event recorded outside any capture joins nobody.
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuEventRecord, ev, s_));
  e_->note_event_record(ev, s_);
  e_->note_stream_wait(other_, ev);
  EXPECT_FALSE(e_->capturing(other_));
  destroy(g, nullptr);
  EXPECT_EQ(CUDA_SUCCESS, TIERRT_CU(cuEventDestroy, ev));
  EXPECT_EQ(CUDA_SUCCESS, free_now(a));  // the capture failed to free it: its graph never ran
  EXPECT_EQ(CUDA_SUCCESS, free_now(b));
}

// A captured launch naming a spilled block: tierrt neither fetches it nor
// makes the capturing stream wait on an event of its own (the driver refuses
// both as capture isolation); the graph's launch makes the block resident.
TEST_F(GraphTest, NothingOfTierrtsIsRecordedIntoOrWaitedOnFromACapture) {
  const CUdeviceptr a = allocate(kBytes, other_);
  ASSERT_EQ(CUDA_SUCCESS, write(a, 7, other_));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
  ASSERT_NO_FATAL_FAILURE(spill_fully(a));
  const std::uint64_t fetches = e_->allocator_stats().fetches;

  ASSERT_EQ(CUDA_SUCCESS, begin(s_, CU_STREAM_CAPTURE_MODE_RELAXED));
  drv::reset_counts();
  drv::set_counting(true);
  EXPECT_EQ(CUDA_SUCCESS, check(a, 7, s_));
  drv::set_counting(false);
  EXPECT_EQ(0u, drv::calls(drv::Id::cuEventRecord)) << "tierrt recorded an event while a launch was captured";
  EXPECT_EQ(0u, drv::calls(drv::Id::cuStreamWaitEvent)) << "a capturing stream was made to wait on tierrt's event";
  EXPECT_EQ(fetches, e_->allocator_stats().fetches) << "a captured launch moved memory";
  CUgraph g = end(s_);

  CUgraphExec exec = instantiate(g);
  ASSERT_EQ(CUDA_SUCCESS, launch_graph(exec, other_));
  EXPECT_EQ(0u, wrong()) << "the graph ran on bytes that were not the block's";
  EXPECT_GT(e_->allocator_stats().fetches, fetches) << "the graph's launch did not fetch its block";
  destroy(g, exec);
  EXPECT_EQ(CUDA_SUCCESS, free_now(a));
}

// While a global-mode capture is open anywhere, nothing spills or is fetched
// (the driver forbids unmapping and mapping then); moves resume at its end.
TEST_F(GraphTest, AGlobalModeCaptureHoldsEveryMove) {
  const CUdeviceptr idle = allocate(kBytes, other_), spilled = allocate(kBytes, other_);
  ASSERT_EQ(CUDA_SUCCESS, write(spilled, 2, other_));
  ASSERT_EQ(CUDA_SUCCESS, TIERRT_CU(cuCtxSynchronize));
  ASSERT_NO_FATAL_FAILURE(spill_fully(spilled));

  ASSERT_EQ(CUDA_SUCCESS, begin(s_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_FALSE(advise(idle, TIERRT_ADVISE_SPILL)) << "a block spilled during a global-mode capture";
  EXPECT_FALSE(advise(spilled, TIERRT_ADVISE_PREFETCH)) << "a block was fetched during a global-mode capture";
  CUgraph g = end(s_);
  EXPECT_TRUE(spills_soon(idle)) << "moves stayed held after the capture ended";
  EXPECT_TRUE(advise(spilled, TIERRT_ADVISE_PREFETCH));
  ASSERT_EQ(CUDA_SUCCESS, check(spilled, 2, other_));
  EXPECT_EQ(0u, wrong());
  destroy(g, nullptr);
  EXPECT_EQ(CUDA_SUCCESS, free_now(idle));
  EXPECT_EQ(CUDA_SUCCESS, free_now(spilled));
}

// A relaxed capture holds nothing: it forbids no call on other threads.
TEST_F(GraphTest, ARelaxedCaptureLetsBlocksMove) {
  const CUdeviceptr idle = allocate(kBytes, other_);
  ASSERT_EQ(CUDA_SUCCESS, begin(s_, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_TRUE(spills_soon(idle));
  destroy(end(s_), nullptr);
  EXPECT_EQ(CUDA_SUCCESS, free_now(idle));
}

// Launches on a stream that name nothing about to move share one use event
// that is recorded later (lazy use events). Before the stream begins a
// capture that event is recorded on it: memory used there before can still
// be handed out again while the capture is open (the new owner's stream
// waits on the event; with no event recorded the host would have to wait for
// a capturing stream, which the driver refuses), and the graph holds only
// what the application captured. (Run with TIERRT_USE_EVENT_WINDOW_US=1000000
// no launch records the event itself.)
TEST_F(GraphTest, AStreamsPendingUsesAreRecordedBeforeItsCaptureBegins) {
  const CUdeviceptr used = allocate(kBytes, other_), named = allocate(kBytes, other_);
  ASSERT_EQ(CUDA_SUCCESS, write(named, 2, s_));
  ASSERT_EQ(CUDA_SUCCESS, write(used, 5, s_));  // its use waits on the stream's next record
  ASSERT_EQ(CUDA_SUCCESS, begin(s_, CU_STREAM_CAPTURE_MODE_RELAXED));
  ASSERT_EQ(CUDA_SUCCESS, check(named, 2, s_));
  ASSERT_EQ(CUDA_SUCCESS, free_on(used, other_));
  const std::uint64_t hits = e_->allocator_stats().cache_hits;
  const CUdeviceptr again = allocate(kBytes, other_);
  EXPECT_NE(0u, again) << "memory used before the capture could not be handed out during it";
  EXPECT_GT(e_->allocator_stats().cache_hits, hits) << "the freed block was not the one reused";
  CUgraph g = end(s_);
  ASSERT_NE(nullptr, g);
  auto get_nodes = testing_graphs::driver_fn<decltype(&cuGraphGetNodes)>("cuGraphGetNodes");
  size_t nodes = 0;
  ASSERT_EQ(CUDA_SUCCESS, get_nodes(g, nullptr, &nodes));
  EXPECT_EQ(1u, nodes) << "something of tierrt's was recorded into the capture";
  CUgraphExec exec = instantiate(g);
  ASSERT_EQ(CUDA_SUCCESS, launch_graph(exec, other_));
  ASSERT_EQ(CUDA_SUCCESS, write(again, 7, other_));
  ASSERT_EQ(CUDA_SUCCESS, check(again, 7, other_));
  EXPECT_EQ(0u, wrong());
  destroy(g, exec);
  if (again != 0) {
    EXPECT_EQ(CUDA_SUCCESS, free_now(again));
  }
  EXPECT_EQ(CUDA_SUCCESS, free_now(named));
}

// cuMemAllocAsync on a capturing stream is the driver's (a graph memory
// node), and so is the captured free of what it returned.
TEST_F(GraphTest, AnAllocationInsideACaptureIsTheDrivers) {
  const std::uint64_t allocs = e_->allocator_stats().allocs;
  ASSERT_EQ(CUDA_SUCCESS, begin(s_, CU_STREAM_CAPTURE_MODE_RELAXED));
  CUdeviceptr p = 0;
  int forwarded = 0;
  const CUresult r = e_->allocate_async(&p, kBytes, s_, [&] {
    ++forwarded;
    return TIERRT_CU(cuMemAllocAsync, &p, kBytes, s_);
  });
  EXPECT_EQ(1, forwarded) << "an allocation inside a capture did not reach the driver";
  EXPECT_EQ(allocs, e_->allocator_stats().allocs) << "tierrt made an allocation of its own inside a capture";
  if (r == CUDA_SUCCESS) {
    int freed = 0;
    EXPECT_EQ(CUDA_SUCCESS, e_->free_async(p, s_, [&] {
      ++freed;
      return TIERRT_CU(cuMemFreeAsync, p, s_);
    }));
    EXPECT_EQ(1, freed) << "the captured free of a graph allocation did not reach the driver";
  }
  destroy(end(s_), nullptr);
}

// A captured cuMemFreeAsync of a tierrt block: its memory is the graph's
// until the graph's first launch frees it (after its work, on its stream).
TEST_F(GraphTest, ACapturedFreeHappensWhenTheGraphFirstRuns) {
  const CUdeviceptr a = allocate(kBytes, s_);
  ASSERT_EQ(CUDA_SUCCESS, begin(s_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_EQ(CUDA_SUCCESS, write(a, 4, s_));
  ASSERT_EQ(CUDA_SUCCESS, check(a, 4, s_));
  int forwarded = 0;
  EXPECT_EQ(CUDA_SUCCESS, e_->free_async(a, s_, [&] {
    ++forwarded;
    return CUDA_ERROR_INVALID_VALUE;  // the driver's answer for memory that is not its own
  }));
  EXPECT_EQ(0, forwarded);
  CUgraph g = end(s_);
  CUgraphExec exec = instantiate(g);

  const CUdeviceptr b = allocate(kBytes, s_);
  EXPECT_NE(a, b) << "the next allocation was given the graph's buffer";
  ASSERT_TRUE(advise(a, TIERRT_ADVISE_PIN)) << "the block was freed before the graph ran";
  ASSERT_TRUE(advise(a, TIERRT_ADVISE_UNPIN));
  ASSERT_EQ(CUDA_SUCCESS, launch_graph(exec, s_));
  EXPECT_EQ(0u, wrong());
  EXPECT_FALSE(advise(a, TIERRT_ADVISE_PIN)) << "the graph's launch did not free the block";
  destroy(g, exec);
  EXPECT_EQ(CUDA_SUCCESS, free_now(b));
}

// Per-thread default streams share one handle: one thread's capture is not
// another's.
TEST(CaptureTracker, PerThreadDefaultStreamsCaptureApart) {
  CaptureTracker t;
  EXPECT_TRUE(t.begin(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_RELAXED, 5));
  EXPECT_TRUE(t.capturing(CU_STREAM_PER_THREAD));
  bool other_thread = true;
  std::thread([&] { other_thread = t.capturing(CU_STREAM_PER_THREAD); }).join();
  EXPECT_FALSE(other_thread) << "another thread's per-thread stream was taken for the capturing one";
  EXPECT_EQ(5u, t.end(5).id);
  EXPECT_FALSE(t.capturing(CU_STREAM_PER_THREAD));
}

// The legacy stream never captures; a capture's streams all end with it,
// and it says whether it held moves.
TEST(CaptureTracker, ACaptureEndsForAllItsStreamsAndSaysItsMode) {
  CaptureTracker t;
  auto stream = [](std::uintptr_t n) { return reinterpret_cast<CUstream>(n); };
  auto event = reinterpret_cast<CUevent>(std::uintptr_t{0x99});
  EXPECT_TRUE(t.begin(stream(0x10), CU_STREAM_CAPTURE_MODE_GLOBAL, 3));
  EXPECT_FALSE(t.capturing(CU_STREAM_LEGACY));
  t.note_record(event, stream(0x10));
  t.note_wait(stream(0x20), event);
  EXPECT_EQ(3u, t.capture_id(stream(0x20)));
  const CaptureTracker::Ended ended = t.end(3);
  EXPECT_EQ(3u, ended.id);
  EXPECT_TRUE(ended.global);
  EXPECT_FALSE(t.capturing(stream(0x10)));
  EXPECT_FALSE(t.capturing(stream(0x20)));
  EXPECT_EQ(0u, t.end(3).id) << "a capture ended twice";
}

}  // namespace
}  // namespace tierrt
