// Streams, events, host functions and stream capture.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "contract.h"

using contract::DeviceBuffer;
using contract::Event;
using contract::Gate;
using contract::PinnedBuffer;
using contract::Stream;

TEST_F(DriverTest, StreamRunsWorkInOrder) {
  Stream s;
  ASSERT_CU(s.status());
  const size_t n = 1 << 16;
  DeviceBuffer d(n * 4);
  ASSERT_CU(d.status());
  PinnedBuffer host(n * 4);
  ASSERT_CU(host.status());
  ASSERT_CU(cuMemsetD32Async(d.ptr(), 0u, n, s));
  for (int i = 0; i < 20; ++i) ASSERT_CU(contract::add_one_u32(kernels(), s, d.ptr(), n));
  ASSERT_CU(cuMemcpyDtoHAsync(host.get(), d.ptr(), n * 4, s));
  ASSERT_CU(cuMemsetD32Async(d.ptr(), 0u, n, s));  // after the copy: must not show
  ASSERT_CU(cuStreamSynchronize(s));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(20u, host.as<uint32_t>()[i]) << i;
}

TEST_F(DriverTest, StreamQueryReportsPendingWork) {
  Stream s;
  ASSERT_CU(s.status());
  Gate gate;
  ASSERT_CU(gate.enqueue(s));
  EXPECT_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(s));
  gate.open();
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_CU(cuStreamQuery(s));
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(DriverTest, StreamPriorities) {
  int least = 0, greatest = 0;
  ASSERT_CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  EXPECT_LE(greatest, least);  // lower numbers are higher priorities
  Stream high(CU_STREAM_NON_BLOCKING, greatest), low(CU_STREAM_NON_BLOCKING, least);
  ASSERT_CU(high.status());
  ASSERT_CU(low.status());
  int p = 12345;
  ASSERT_CU(cuStreamGetPriority(high, &p));
  EXPECT_EQ(greatest, p);
  ASSERT_CU(cuStreamGetPriority(low, &p));
  EXPECT_EQ(least, p);
  // Out of range priorities are clamped.
  Stream beyond(CU_STREAM_NON_BLOCKING, greatest - 100);
  ASSERT_CU(beyond.status());
  ASSERT_CU(cuStreamGetPriority(beyond, &p));
  EXPECT_EQ(greatest, p);
  unsigned int flags = 0;
  ASSERT_CU(cuStreamGetFlags(high, &flags));
  EXPECT_EQ(static_cast<unsigned int>(CU_STREAM_NON_BLOCKING), flags);
  // Prioritised streams do work like any other.
  DeviceBuffer d(4096);
  ASSERT_CU(d.status());
  ASSERT_CU(contract::fill_u32(kernels(), high, d.ptr(), 5u, 1024));
  ASSERT_CU(cuStreamSynchronize(high));
}

TEST_F(DriverTest, StreamsRunConcurrently) {
  // Work on stream b completes while stream a is held by a host function.
  Stream a, b;
  ASSERT_CU(a.status());
  ASSERT_CU(b.status());
  Gate gate;
  ASSERT_CU(gate.enqueue(a));
  DeviceBuffer d(4096);
  ASSERT_CU(d.status());
  ASSERT_CU(contract::fill_u32(kernels(), b, d.ptr(), 3u, 1024));
  EXPECT_CU(contract::wait_idle(b, 5000));
  EXPECT_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(a));
  gate.open();
  ASSERT_CU(cuStreamSynchronize(a));
}

TEST_F(DriverTest, StreamWaitEventOrdersWorkAcrossStreams) {
  Stream producer, consumer;
  ASSERT_CU(producer.status());
  ASSERT_CU(consumer.status());
  Event ready(CU_EVENT_DISABLE_TIMING);
  ASSERT_CU(ready.status());
  const size_t n = 1 << 16;
  DeviceBuffer d(n * 4);
  ASSERT_CU(d.status());
  PinnedBuffer host(n * 4);
  ASSERT_CU(host.status());
  ASSERT_CU(cuMemsetD32(d.ptr(), 100u, n));
  ASSERT_CU(cuCtxSynchronize());  // non-blocking streams don't wait for the NULL stream

  // The producer is held, then writes 1; the consumer adds one after it.
  Gate gate;
  ASSERT_CU(gate.enqueue(producer));
  ASSERT_CU(cuMemsetD32Async(d.ptr(), 1u, n, producer));
  ASSERT_CU(cuEventRecord(ready, producer));
  ASSERT_CU(cuStreamWaitEvent(consumer, ready, 0));
  ASSERT_CU(contract::add_one_u32(kernels(), consumer, d.ptr(), n));
  ASSERT_CU(cuMemcpyDtoHAsync(host.get(), d.ptr(), n * 4, consumer));

  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(consumer));  // still waiting for the producer
  EXPECT_EQ(CUDA_ERROR_NOT_READY, cuEventQuery(ready));
  gate.open();
  ASSERT_CU(cuStreamSynchronize(consumer));
  EXPECT_CU(cuEventQuery(ready));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(2u, host.as<uint32_t>()[i]) << i;
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(DriverTest, StreamWaitEventUsesTheRecordCurrentAtTheCall) {
  // cuStreamWaitEvent waits for the event's most recent record as of the
  // call; recording the event again afterwards does not release the waiter.
  Stream held, waiter, idle;
  ASSERT_CU(held.status());
  ASSERT_CU(waiter.status());
  ASSERT_CU(idle.status());
  Event e(CU_EVENT_DISABLE_TIMING);
  ASSERT_CU(e.status());
  Gate gate;
  ASSERT_CU(gate.enqueue(held));
  ASSERT_CU(cuEventRecord(e, held));
  ASSERT_CU(cuStreamWaitEvent(waiter, e, 0));
  ASSERT_CU(cuEventRecord(e, idle));  // completes at once
  ASSERT_CU(cuStreamSynchronize(idle));
  EXPECT_CU(cuEventQuery(e));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(waiter));
  gate.open();
  ASSERT_CU(cuStreamSynchronize(waiter));
  ASSERT_CU(cuStreamSynchronize(held));
}

TEST_F(DriverTest, LegacyStreamSynchronizesWithBlockingStreams) {
  Stream blocking(CU_STREAM_DEFAULT), non_blocking(CU_STREAM_NON_BLOCKING);
  ASSERT_CU(blocking.status());
  ASSERT_CU(non_blocking.status());
  DeviceBuffer d(4096);
  ASSERT_CU(d.status());
  {
    // Legacy-stream work waits for earlier work in blocking streams...
    Gate gate;
    ASSERT_CU(gate.enqueue(blocking));
    ASSERT_CU(cuMemsetD8Async(d.ptr(), 1, 4096, CU_STREAM_LEGACY));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(CU_STREAM_LEGACY));
    EXPECT_CU(cuStreamQuery(non_blocking));  // ...but non-blocking streams do not
    gate.open();
    ASSERT_CU(cuCtxSynchronize());
  }
  {
    // ...and later work in blocking streams waits for the legacy stream.
    Gate gate;
    ASSERT_CU(gate.enqueue(CU_STREAM_LEGACY));
    ASSERT_CU(cuMemsetD8Async(d.ptr(), 2, 4096, blocking));
    ASSERT_CU(cuMemsetD8Async(d.ptr(), 3, 16, non_blocking));
    EXPECT_CU(contract::wait_idle(non_blocking, 5000));
    EXPECT_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(blocking));
    gate.open();
    ASSERT_CU(cuCtxSynchronize());
  }
}

TEST_F(DriverTest, DestroyingAStreamWithPendingWorkLetsTheWorkFinish) {
  DeviceBuffer d(4096);
  ASSERT_CU(d.status());
  ASSERT_CU(cuMemsetD8(d.ptr(), 0, 4096));
  // The memset is asynchronous and a non-blocking stream does not wait for it.
  ASSERT_CU(cuCtxSynchronize());
  Gate gate;
  CUstream s = nullptr;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(gate.enqueue(s));
  ASSERT_CU(cuMemsetD8Async(d.ptr(), 7, 4096, s));
  CUevent e = nullptr;
  ASSERT_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventRecord(e, s));
  ASSERT_CU(cuStreamDestroy(s));  // returns at once; the work still runs
  ASSERT_CU(cuEventDestroy(e));
  gate.open();
  ASSERT_CU(cuCtxSynchronize());
  unsigned char v = 0;
  ASSERT_CU(cuMemcpyDtoH(&v, d.ptr() + 4095, 1));
  EXPECT_EQ(7, v);
}

TEST_F(DriverTest, WaitOnNeverRecordedEventDoesNotBlock) {
  Stream s;
  ASSERT_CU(s.status());
  Event e;
  ASSERT_CU(e.status());
  EXPECT_CU(cuEventQuery(e));  // no work captured: complete
  ASSERT_CU(cuStreamWaitEvent(s, e, 0));
  EXPECT_CU(contract::wait_idle(s, 5000));
}

TEST_F(DriverTest, EventRecordQuerySynchronize) {
  Stream s;
  ASSERT_CU(s.status());
  Event e;
  ASSERT_CU(e.status());
  Gate gate;
  ASSERT_CU(gate.enqueue(s));
  ASSERT_CU(cuEventRecord(e, s));
  EXPECT_EQ(CUDA_ERROR_NOT_READY, cuEventQuery(e));
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.open();
  });
  EXPECT_CU(cuEventSynchronize(e));
  opener.join();
  EXPECT_CU(cuEventQuery(e));
  EXPECT_TRUE(gate.entered());
  ASSERT_CU(cuStreamSynchronize(s));
}

TEST_F(DriverTest, EventElapsedTimeCoversWorkBetweenEvents) {
  Stream s;
  ASSERT_CU(s.status());
  Event start, stop;
  ASSERT_CU(start.status());
  ASSERT_CU(stop.status());
  ASSERT_CU(cuEventRecord(start, s));
  ASSERT_CU(cuLaunchHostFunc(
      s, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }, nullptr));
  ASSERT_CU(cuEventRecord(stop, s));
  ASSERT_CU(cuEventSynchronize(stop));
  float ms = -1.f;
  ASSERT_CU(cuEventElapsedTime(&ms, start, stop));
  EXPECT_GE(ms, 25.f);  // a lower bound only
  ASSERT_CU(cuEventElapsedTime(&ms, stop, start));
  EXPECT_LE(ms, -25.f);
}

TEST_F(DriverTest, EventElapsedTimeErrors) {
  Stream s;
  ASSERT_CU(s.status());
  Event a, b, untimed(CU_EVENT_DISABLE_TIMING), never;
  ASSERT_CU(a.status());
  ASSERT_CU(b.status());
  ASSERT_CU(untimed.status());
  ASSERT_CU(never.status());
  float ms = 0.f;
  ASSERT_CU(cuEventRecord(a, s));
  ASSERT_CU(cuEventRecord(untimed, s));
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, a, untimed));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, a, never));

  Gate gate;
  ASSERT_CU(gate.enqueue(s));
  ASSERT_CU(cuEventRecord(b, s));
  EXPECT_EQ(CUDA_ERROR_NOT_READY, cuEventElapsedTime(&ms, a, b));
  gate.open();
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_CU(cuEventElapsedTime(&ms, a, b));
}

TEST_F(DriverTest, HostFunctionsRunInStreamOrder) {
  Stream s;
  ASSERT_CU(s.status());
  struct Log {
    std::atomic<int> next{0};
    int order[3] = {-1, -1, -1};
  } log;
  struct Step {
    Log* log;
    int id;
  } steps[3] = {{&log, 0}, {&log, 1}, {&log, 2}};
  DeviceBuffer d(4096);
  ASSERT_CU(d.status());
  for (auto& st : steps) {
    ASSERT_CU(contract::add_one_u32(kernels(), s, d.ptr(), 1024));
    ASSERT_CU(cuLaunchHostFunc(
        s,
        [](void* p) {
          auto* step = static_cast<Step*>(p);
          step->log->order[step->log->next.fetch_add(1)] = step->id;
        },
        &st));
  }
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(3, log.next.load());
  EXPECT_EQ(0, log.order[0]);
  EXPECT_EQ(1, log.order[1]);
  EXPECT_EQ(2, log.order[2]);
}

TEST_F(DriverTest, HostFunctionSeesPriorWorkComplete) {
  Stream s;
  ASSERT_CU(s.status());
  const size_t n = 1 << 16;
  PinnedBuffer host(n * 4);
  ASSERT_CU(host.status());
  DeviceBuffer d(n * 4);
  ASSERT_CU(d.status());
  ASSERT_CU(contract::fill_u32(kernels(), s, d.ptr(), 9u, n));
  ASSERT_CU(cuMemcpyDtoHAsync(host.get(), d.ptr(), n * 4, s));
  struct Check {
    const uint32_t* p;
    size_t n;
    bool ok = false;
  } check{host.as<uint32_t>(), n};
  ASSERT_CU(cuLaunchHostFunc(
      s,
      [](void* p) {
        auto* c = static_cast<Check*>(p);
        c->ok = true;
        for (size_t i = 0; i < c->n; ++i) c->ok = c->ok && c->p[i] == 9u;
      },
      &check));
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_TRUE(check.ok);
}

TEST_F(DriverTest, StreamCaptureStatus) {
  Stream s;
  ASSERT_CU(s.status());
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  ASSERT_CU(cuStreamIsCapturing(s, &st));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, st);
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  ASSERT_CU(cuStreamIsCapturing(s, &st));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, st);
  // Capturing is per stream.
  Stream other;
  ASSERT_CU(other.status());
  ASSERT_CU(cuStreamIsCapturing(other, &st));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, st);
  CUgraph g = nullptr;
  ASSERT_CU(cuStreamEndCapture(s, &g));
  EXPECT_NE(nullptr, g);
  ASSERT_CU(cuStreamIsCapturing(s, &st));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, st);
  if (g) {
    EXPECT_CU(cuGraphDestroy(g));
  }
}

TEST_F(DriverTest, CapturedWorkDoesNotRun) {
  Stream s;
  ASSERT_CU(s.status());
  DeviceBuffer d(4096);
  ASSERT_CU(d.status());
  ASSERT_CU(cuMemsetD32(d.ptr(), 1u, 1024));
  ASSERT_CU(cuCtxSynchronize());  // non-blocking streams don't wait for the NULL stream
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  ASSERT_CU(cuMemsetD32Async(d.ptr(), 2u, 1024, s));
  ASSERT_CU(contract::add_one_u32(kernels(), s, d.ptr(), 1024));
  CUgraph g = nullptr;
  ASSERT_CU(cuStreamEndCapture(s, &g));
  ASSERT_CU(cuCtxSynchronize());
  uint32_t v = 0;
  ASSERT_CU(cuMemcpyDtoH(&v, d.ptr() + 400, 4));
  EXPECT_EQ(1u, v);  // recorded into the graph, not executed
  if (g) {
    EXPECT_CU(cuGraphDestroy(g));
  }
}

TEST_F(DriverTest, SynchronizingACapturingStreamIsRefused) {
  Stream s;
  ASSERT_CU(s.status());
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuStreamSynchronize(s));
  // The refusal invalidates the capture.
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_CU(cuStreamIsCapturing(s, &st));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_INVALIDATED, st);
  CUgraph g = reinterpret_cast<CUgraph>(1);
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(s, &g));
  EXPECT_EQ(nullptr, g);
  ASSERT_CU(cuStreamIsCapturing(s, &st));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, st);
  EXPECT_CU(cuStreamSynchronize(s));  // usable again
}

TEST_F(DriverTest, CaptureOnTheLegacyStreamIsRefused) {
  EXPECT_NE(CUDA_SUCCESS,
            cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  ASSERT_CU(cuStreamIsCapturing(CU_STREAM_LEGACY, &st));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, st);
}
