// Stream capture as the driver documents it: what each capture mode forbids
// on this and other threads, side streams joined through events, the
// capture boundary, capture into an existing graph, the capture's
// dependencies, and stream-ordered allocation inside a capture.
#include <mutex>
#include <thread>
#include <vector>

#include "contract.h"

using contract::DeviceBuffer;
using contract::Event;
using contract::PinnedBuffer;
using contract::Stream;

namespace {

// Runs fn on a fresh thread with the test's context current; returns its result.
template <class Fn>
CUresult on_other_thread(CUcontext ctx, Fn fn) {
  CUresult r = CUDA_ERROR_UNKNOWN;
  std::thread t([&] {
    r = cuCtxSetCurrent(ctx);
    if (r == CUDA_SUCCESS) r = fn();
  });
  t.join();
  return r;
}

// Allocations granted during a capture, freed once it has ended (a free
// may synchronise, which a capture in progress must not see).
std::mutex g_probes_mu;
std::vector<CUdeviceptr> g_probes;

// A potentially unsafe call: a plain allocation.
CUresult try_mem_alloc() {
  CUdeviceptr p = 0;
  CUresult r = cuMemAlloc(&p, 4096);
  if (r == CUDA_SUCCESS) {
    std::lock_guard lock(g_probes_mu);
    g_probes.push_back(p);
  }
  return r;
}

void free_probes() {
  std::lock_guard lock(g_probes_mu);
  for (CUdeviceptr p : g_probes) EXPECT_CU(cuMemFree(p));
  g_probes.clear();
}

CUresult with_thread_mode(CUstreamCaptureMode mode, CUresult (*fn)()) {
  CUstreamCaptureMode m = mode;
  CUresult r = cuThreadExchangeStreamCaptureMode(&m);
  if (r != CUDA_SUCCESS) return r;
  r = fn();
  cuThreadExchangeStreamCaptureMode(&m);
  return r;
}

CUstreamCaptureStatus capture_status(CUstream s) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_CU(cuStreamIsCapturing(s, &st));
  return st;
}

// Ends the capture of s and destroys the graph, whatever the outcome.
CUresult end_and_discard(CUstream s) {
  CUgraph g = nullptr;
  CUresult r = cuStreamEndCapture(s, &g);
  if (g) cuGraphDestroy(g);
  return r;
}

}  // namespace

TEST_F(DriverTest, GlobalCaptureForbidsUnsafeCallsOnItsThread) {
  Stream s;
  ASSERT_CU(s.status());
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, try_mem_alloc());
  // The refused call breaks the capture.
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_INVALIDATED, capture_status(s));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, end_and_discard(s));
  EXPECT_CU(try_mem_alloc());
  free_probes();
}

TEST_F(DriverTest, ThreadLocalCaptureForbidsUnsafeCallsOnlyOnItsThread) {
  Stream s;
  ASSERT_CU(s.status());
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  EXPECT_CU(on_other_thread(context(), try_mem_alloc));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, capture_status(s));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, try_mem_alloc());
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, end_and_discard(s));
  free_probes();
}

TEST_F(DriverTest, GlobalCaptureForbidsUnsafeCallsOnOtherThreadsInGlobalMode) {
  Stream s;
  ASSERT_CU(s.status());
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  // Threads in relaxed or thread-local mode ignore other threads' captures.
  EXPECT_CU(on_other_thread(context(), [] { return with_thread_mode(CU_STREAM_CAPTURE_MODE_RELAXED, try_mem_alloc); }));
  EXPECT_CU(on_other_thread(context(), [] {
    return with_thread_mode(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, try_mem_alloc);
  }));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, capture_status(s));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, on_other_thread(context(), try_mem_alloc));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, end_and_discard(s));
  free_probes();
}

TEST_F(DriverTest, RelaxedCaptureAllowsUnsafeCalls) {
  Stream s;
  ASSERT_CU(s.status());
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_CU(try_mem_alloc());
  EXPECT_CU(on_other_thread(context(), try_mem_alloc));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, capture_status(s));
  EXPECT_CU(end_and_discard(s));
  free_probes();
}

TEST_F(DriverTest, RelaxedThreadModeLiftsItsOwnGlobalCapturesBan) {
  Stream s;
  ASSERT_CU(s.status());
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_CU(with_thread_mode(CU_STREAM_CAPTURE_MODE_RELAXED, try_mem_alloc));
  EXPECT_CU(end_and_discard(s));
  free_probes();
}

// The programming guide counts synchronous work among the potentially unsafe
// calls, but NVIDIA's driver 580 (H200) lets a synchronous copy into device
// memory through a global capture of a non-blocking stream, and the capture
// stays valid.
TEST_F(DriverTest, SynchronousCopyGoesThroughAGlobalCapture) {
  Stream s;
  ASSERT_CU(s.status());
  DeviceBuffer d(4096);
  ASSERT_CU(d.status());
  std::vector<uint32_t> host(1024, 7);
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_CU(cuMemcpyHtoD(d.ptr(), host.data(), 4096));
  EXPECT_CU(end_and_discard(s));
}

TEST_F(DriverTest, QueryingACapturingStreamIsRefused) {
  Stream s;
  ASSERT_CU(s.status());
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuStreamQuery(s));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, end_and_discard(s));
}

TEST_F(DriverTest, LegacyStreamReportsImplicitWhileABlockingStreamCaptures) {
  Stream s(CU_STREAM_DEFAULT);
  ASSERT_CU(s.status());
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cuStreamIsCapturing(CU_STREAM_LEGACY, &st));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, capture_status(s));  // the query does not break the capture
  EXPECT_CU(end_and_discard(s));
}

TEST_F(DriverTest, SideStreamJoinedThroughEventsIsCapturedAndReplays) {
  Stream origin, side;
  Event fork, join;
  for (CUresult r : {origin.status(), side.status(), fork.status(), join.status()}) ASSERT_CU(r);
  DeviceBuffer a(4096), b(4096);
  ASSERT_CU(a.status());
  ASSERT_CU(b.status());
  ASSERT_CU(cuStreamBeginCapture(origin, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(contract::fill_u32(kernels(), origin, a.ptr(), 5u, 1024));
  ASSERT_CU(cuEventRecord(fork, origin));
  ASSERT_CU(cuStreamWaitEvent(side, fork, 0));
  // The side stream is now part of the same capture.
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t origin_id = 0, side_id = 0;
  ASSERT_CU(cuStreamGetCaptureInfo(origin, &st, &origin_id, nullptr, nullptr, nullptr, nullptr));
  ASSERT_CU(cuStreamGetCaptureInfo(side, &st, &side_id, nullptr, nullptr, nullptr, nullptr));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, st);
  EXPECT_EQ(origin_id, side_id);
  ASSERT_CU(contract::copy_bytes(kernels(), side, b.ptr(), a.ptr(), 4096));
  ASSERT_CU(contract::add_one_u32(kernels(), side, b.ptr(), 1024));
  ASSERT_CU(cuEventRecord(join, side));
  ASSERT_CU(cuStreamWaitEvent(origin, join, 0));
  CUgraph g = nullptr;
  ASSERT_CU(cuStreamEndCapture(origin, &g));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, capture_status(side));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, g, 0));
  ASSERT_CU(cuGraphLaunch(exec, origin));
  ASSERT_CU(cuStreamSynchronize(origin));
  std::vector<uint32_t> got(1024);
  ASSERT_CU(cuMemcpyDtoH(got.data(), b.ptr(), 4096));
  EXPECT_EQ(std::vector<uint32_t>(1024, 6u), got);
  EXPECT_CU(cuGraphExecDestroy(exec));
  EXPECT_CU(cuGraphDestroy(g));
}

TEST_F(DriverTest, SideStreamNotJoinedBackFailsTheCapture) {
  Stream origin, side;
  Event fork;
  for (CUresult r : {origin.status(), side.status(), fork.status()}) ASSERT_CU(r);
  DeviceBuffer a(4096);
  ASSERT_CU(a.status());
  ASSERT_CU(cuStreamBeginCapture(origin, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuEventRecord(fork, origin));
  ASSERT_CU(cuStreamWaitEvent(side, fork, 0));
  ASSERT_CU(contract::fill_u32(kernels(), side, a.ptr(), 1u, 1024));
  CUgraph g = reinterpret_cast<CUgraph>(1);
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, cuStreamEndCapture(origin, &g));
  EXPECT_EQ(nullptr, g);
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, capture_status(side));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, capture_status(origin));
}

TEST_F(DriverTest, WaitingOnAnEventRecordedOutsideTheCaptureIsAnIsolationError) {
  Stream outside, s;
  Event e;
  for (CUresult r : {outside.status(), s.status(), e.status()}) ASSERT_CU(r);
  ASSERT_CU(cuEventRecord(e, outside));
  ASSERT_CU(cuStreamSynchronize(outside));
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, cuStreamWaitEvent(s, e, 0));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_INVALIDATED, capture_status(s));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, end_and_discard(s));
}

TEST_F(DriverTest, AnEventRecordedInACaptureCannotBeQueried) {
  Stream s;
  Event e;
  ASSERT_CU(s.status());
  ASSERT_CU(e.status());
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  ASSERT_CU(cuEventRecord(e, s));
  EXPECT_EQ(CUDA_ERROR_CAPTURED_EVENT, cuEventQuery(e));
  // Read on NVIDIA's driver 580 (H200): the query also ends the capture.
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, end_and_discard(s));
}

TEST_F(DriverTest, CaptureInfoNamesTheGraphAndTheLastNode) {
  Stream s;
  ASSERT_CU(s.status());
  DeviceBuffer a(4096);
  ASSERT_CU(a.status());
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemsetD32Async(a.ptr(), 1u, 1024, s));
  ASSERT_CU(contract::add_one_u32(kernels(), s, a.ptr(), 1024));
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph during = nullptr;
  const CUgraphNode* deps = nullptr;
  size_t ndeps = 0;
  ASSERT_CU(cuStreamGetCaptureInfo(s, &st, nullptr, &during, &deps, nullptr, &ndeps));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, st);
  ASSERT_EQ(1u, ndeps);
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_CU(cuGraphNodeGetType(deps[0], &type));
  EXPECT_EQ(CU_GRAPH_NODE_TYPE_KERNEL, type);
  CUgraph g = nullptr;
  ASSERT_CU(cuStreamEndCapture(s, &g));
  EXPECT_EQ(during, g);
  size_t count = 0;
  ASSERT_CU(cuGraphGetNodes(g, nullptr, &count));
  EXPECT_EQ(2u, count);
  EXPECT_CU(cuGraphDestroy(g));
}

TEST_F(DriverTest, CaptureToAnExistingGraphAddsAfterTheGivenNodes) {
  Stream s;
  ASSERT_CU(s.status());
  DeviceBuffer a(4096);
  ASSERT_CU(a.status());
  CUgraph g = nullptr;
  ASSERT_CU(cuGraphCreate(&g, 0));
  CUDA_MEMSET_NODE_PARAMS ms{};
  ms.dst = a.ptr();
  ms.value = 40u;
  ms.elementSize = 4;
  ms.width = 1024;
  ms.height = 1;
  CUgraphNode set = nullptr;
  ASSERT_CU(cuGraphAddMemsetNode(&set, g, nullptr, 0, &ms, context()));
  ASSERT_CU(cuStreamBeginCaptureToGraph(s, g, &set, nullptr, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(contract::add_one_u32(kernels(), s, a.ptr(), 1024));
  ASSERT_CU(contract::add_one_u32(kernels(), s, a.ptr(), 1024));
  CUgraph out = nullptr;
  ASSERT_CU(cuStreamEndCapture(s, &out));
  EXPECT_EQ(g, out);
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, g, 0));
  ASSERT_CU(cuGraphLaunch(exec, s));
  ASSERT_CU(cuStreamSynchronize(s));
  std::vector<uint32_t> got(1024);
  ASSERT_CU(cuMemcpyDtoH(got.data(), a.ptr(), 4096));
  EXPECT_EQ(std::vector<uint32_t>(1024, 42u), got);
  EXPECT_CU(cuGraphExecDestroy(exec));
  EXPECT_CU(cuGraphDestroy(g));
}

TEST_F(DriverTest, StreamOrderedAllocationInACaptureIsValidWhenTheGraphRuns) {
  Stream s;
  ASSERT_CU(s.status());
  PinnedBuffer out(4096);
  ASSERT_CU(out.status());
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAllocAsync(&p, 4096, s));
  ASSERT_CU(contract::fill_u32(kernels(), s, p, 9u, 1024));
  ASSERT_CU(cuMemcpyDtoHAsync(out.get(), p, 4096, s));
  ASSERT_CU(cuMemFreeAsync(p, s));
  CUgraph g = nullptr;
  ASSERT_CU(cuStreamEndCapture(s, &g));
  CUgraphExec exec = nullptr;
  ASSERT_CU(cuGraphInstantiate(&exec, g, 0));
  for (int launch = 0; launch < 2; ++launch) {
    std::fill(out.as<uint32_t>(), out.as<uint32_t>() + 1024, 0u);
    ASSERT_CU(cuGraphLaunch(exec, s));
    ASSERT_CU(cuStreamSynchronize(s));
    EXPECT_EQ(std::vector<uint32_t>(1024, 9u), std::vector<uint32_t>(out.as<uint32_t>(), out.as<uint32_t>() + 1024));
  }
  EXPECT_CU(cuGraphExecDestroy(exec));
  EXPECT_CU(cuGraphDestroy(g));
}

TEST_F(DriverTest, CapturedFreeOfMemoryAllocatedOutsideTheCaptureIsRefused) {
  Stream s;
  ASSERT_CU(s.status());
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAllocAsync(&p, 4096, s));
  ASSERT_CU(cuStreamSynchronize(s));
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  // A captured free is a graph free node, which takes only graph allocations.
  EXPECT_NE(CUDA_SUCCESS, cuMemFreeAsync(p, s));
  end_and_discard(s);
  EXPECT_CU(cuMemFreeAsync(p, s));
  EXPECT_CU(cuStreamSynchronize(s));
}
