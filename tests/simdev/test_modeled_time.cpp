// Modeled time: copy bandwidth per direction (SIMDEV_H2D_GBPS /
// SIMDEV_D2H_GBPS), one copy engine per direction shared by all streams, and
// kernels' modeled duration. Every timing check is a lower bound on modeled
// time (or, for overlap, a bound well above the overlapped and well below the
// serialised model), never a claim about how fast the host is.
#include <atomic>
#include <chrono>
#include <fstream>
#include <initializer_list>
#include <string>
#include <thread>

#include "simdev_test.h"

using contract::DeviceBuffer;
using contract::Event;
using contract::PinnedBuffer;
using contract::Stream;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

double gbps_from_env(const char* name) {
  const std::string v = env_or_empty(name);
  return v.empty() ? 0.0 : std::stod(v);
}

double modeled_ms(size_t bytes, double gbps) { return bytes / (gbps * 1e9) * 1e3; }

// Runs the copies once untimed, so that the timed run measures the copy
// engines, not the host faulting in fresh pages on first use.
template <class Copies>
void warm_up(Copies copies, std::initializer_list<CUstream> streams) {
  ASSERT_CU(copies());
  for (CUstream s : streams) ASSERT_CU(cuStreamSynchronize(s));
}

double wall_ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

class SimdevModeledCopy : public SimdevTest {
 protected:
  void SetUp() override {
    SimdevTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    h2d_ = gbps_from_env("SIMDEV_H2D_GBPS");
    d2h_ = gbps_from_env("SIMDEV_D2H_GBPS");
    if (h2d_ <= 0 || d2h_ <= 0) GTEST_SKIP() << "needs SIMDEV_H2D_GBPS and SIMDEV_D2H_GBPS";
  }
  double h2d_ = 0, d2h_ = 0;
};

}  // namespace

TEST_F(SimdevModeledCopy, Env_H2DTakesAtLeastTheModeledTime) {
  const size_t bytes = 64 * kMiB;
  PinnedBuffer host(bytes);
  ASSERT_CU(host.status());
  DeviceBuffer d(bytes);
  ASSERT_CU(d.status());
  Stream s;
  ASSERT_CU(s.status());
  Event start, stop;
  ASSERT_CU(start.status());
  ASSERT_CU(stop.status());
  ASSERT_CU(cuEventRecord(start, s));
  ASSERT_CU(cuMemcpyHtoDAsync(d.ptr(), host.get(), bytes, s));
  ASSERT_CU(cuEventRecord(stop, s));
  ASSERT_CU(cuEventSynchronize(stop));
  float ms = 0;
  ASSERT_CU(cuEventElapsedTime(&ms, start, stop));
  // SIMDEV_H2D_GBPS=1: 64 MiB is 67 ms of modeled time.
  EXPECT_GE(ms, 0.9 * modeled_ms(bytes, h2d_));
}

TEST_F(SimdevModeledCopy, Env_D2HTakesAtLeastTheModeledTime) {
  const size_t bytes = 64 * kMiB;
  PinnedBuffer host(bytes);
  ASSERT_CU(host.status());
  DeviceBuffer d(bytes);
  ASSERT_CU(d.status());
  Stream s;
  ASSERT_CU(s.status());
  Event start, stop;
  ASSERT_CU(start.status());
  ASSERT_CU(stop.status());
  ASSERT_CU(cuEventRecord(start, s));
  ASSERT_CU(cuMemcpyDtoHAsync(host.get(), d.ptr(), bytes, s));
  ASSERT_CU(cuEventRecord(stop, s));
  ASSERT_CU(cuEventSynchronize(stop));
  float ms = 0;
  ASSERT_CU(cuEventElapsedTime(&ms, start, stop));
  EXPECT_GE(ms, 0.9 * modeled_ms(bytes, d2h_));
}

TEST_F(SimdevModeledCopy, Env_TwoH2DCopiesShareOneEngine) {
  const size_t bytes = 64 * kMiB;
  PinnedBuffer h1(bytes), h2(bytes);
  DeviceBuffer d1(bytes), d2(bytes);
  Stream s1, s2;
  for (CUresult r : {h1.status(), h2.status(), d1.status(), d2.status(), s1.status(), s2.status()})
    ASSERT_CU(r);
  auto copies = [&] {
    CUresult r = cuMemcpyHtoDAsync(d1.ptr(), h1.get(), bytes, s1);
    return r == CUDA_SUCCESS ? cuMemcpyHtoDAsync(d2.ptr(), h2.get(), bytes, s2) : r;
  };
  warm_up(copies, {s1, s2});
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_CU(copies());
  ASSERT_CU(cuStreamSynchronize(s1));
  ASSERT_CU(cuStreamSynchronize(s2));
  const double ms = wall_ms_since(t0);
  // Serialised on one engine: two copies' worth of modeled time.
  EXPECT_GE(ms, 0.9 * 2 * modeled_ms(bytes, h2d_));
}

TEST_F(SimdevModeledCopy, Env_H2DAndD2HOverlap) {
  const size_t bytes = 64 * kMiB;
  PinnedBuffer h1(bytes), h2(bytes);
  DeviceBuffer d1(bytes), d2(bytes);
  Stream s1, s2;
  for (CUresult r : {h1.status(), h2.status(), d1.status(), d2.status(), s1.status(), s2.status()})
    ASSERT_CU(r);
  auto copies = [&] {
    CUresult r = cuMemcpyHtoDAsync(d1.ptr(), h1.get(), bytes, s1);
    return r == CUDA_SUCCESS ? cuMemcpyDtoHAsync(h2.get(), d2.ptr(), bytes, s2) : r;
  };
  warm_up(copies, {s1, s2});
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_CU(copies());
  ASSERT_CU(cuStreamSynchronize(s1));
  ASSERT_CU(cuStreamSynchronize(s2));
  const double ms = wall_ms_since(t0);
  const double one = std::max(modeled_ms(bytes, h2d_), modeled_ms(bytes, d2h_));
  const double both = modeled_ms(bytes, h2d_) + modeled_ms(bytes, d2h_);
  EXPECT_GE(ms, 0.9 * one);
  // Two engines: well under the serialised time (margin for a loaded host).
  EXPECT_LT(ms, 0.85 * both) << "H2D and D2H did not overlap";
}

// Device memory backed by a HOST handle: every byte written there crosses the link.
class HostBackedRange {
 public:
  explicit HostBackedRange(size_t bytes) : bytes_(bytes) {
    CUmemAllocationProp p{};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    status_ = cuMemAddressReserve(&va_, bytes, 0, 0, 0);
    if (status_ == CUDA_SUCCESS) status_ = cuMemCreate(&handle_, bytes, &p, 0);
    if (status_ == CUDA_SUCCESS) status_ = cuMemMap(va_, bytes, 0, handle_, 0);
    if (status_ == CUDA_SUCCESS) status_ = cuMemSetAccess(va_, bytes, &access, 1);
  }
  ~HostBackedRange() {
    if (va_) cuMemUnmap(va_, bytes_);
    if (handle_) cuMemRelease(handle_);
    if (va_) cuMemAddressFree(va_, bytes_);
  }
  CUresult status() const { return status_; }
  CUdeviceptr ptr() const { return va_; }

 private:
  size_t bytes_;
  CUdeviceptr va_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
  CUresult status_ = CUDA_ERROR_NOT_INITIALIZED;
};

TEST_F(SimdevModeledCopy, Env_DeviceToDeviceCopiesIntoHostBackedMemoryTakeTheLinkTime) {
  const size_t bytes = 32 * kMiB;
  DeviceBuffer d(bytes);
  HostBackedRange host(bytes);
  Stream s;
  for (CUresult r : {d.status(), host.status(), s.status()}) ASSERT_CU(r);
  auto copy = [&] { return cuMemcpyDtoDAsync(host.ptr(), d.ptr(), bytes, s); };
  warm_up(copy, {s});
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_CU(copy());
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_GE(wall_ms_since(t0), 0.9 * modeled_ms(bytes, d2h_));
  // Back to the device: the other direction of the link.
  t0 = std::chrono::steady_clock::now();
  ASSERT_CU(cuMemcpyDtoDAsync(d.ptr(), host.ptr(), bytes, s));
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_GE(wall_ms_since(t0), 0.9 * modeled_ms(bytes, h2d_));
}

TEST_F(SimdevModeledCopy, Env_DeviceToDeviceCopyIntoPinnedHostBackedPointerTakesTheLinkTime) {
  const size_t bytes = 32 * kMiB;
  DeviceBuffer d(bytes);
  PinnedBuffer pinned(bytes, CU_MEMHOSTALLOC_DEVICEMAP);
  Stream s;
  for (CUresult r : {d.status(), pinned.status(), s.status()}) ASSERT_CU(r);
  CUdeviceptr mapped = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&mapped, pinned.get(), 0));
  auto copy = [&] { return cuMemcpyDtoDAsync(mapped, d.ptr(), bytes, s); };
  warm_up(copy, {s});
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_CU(copy());
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_GE(wall_ms_since(t0), 0.9 * modeled_ms(bytes, d2h_));
}

TEST_F(SimdevModeledCopy, Env_MemsetOfHostBackedMemoryTakesTheLinkTime) {
  const size_t bytes = 32 * kMiB;
  HostBackedRange host(bytes);
  Stream s;
  for (CUresult r : {host.status(), s.status()}) ASSERT_CU(r);
  auto set = [&] { return cuMemsetD32Async(host.ptr(), 3u, bytes / 4, s); };
  warm_up(set, {s});
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_CU(set());
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_GE(wall_ms_since(t0), 0.9 * modeled_ms(bytes, d2h_));
}

TEST_F(SimdevModeledCopy, Env_SameStreamCopiesDoNotOverlap) {
  const size_t bytes = 32 * kMiB;
  PinnedBuffer h1(bytes), h2(bytes);
  DeviceBuffer d1(bytes), d2(bytes);
  Stream s;
  for (CUresult r : {h1.status(), h2.status(), d1.status(), d2.status(), s.status()}) ASSERT_CU(r);
  auto copies = [&] {
    CUresult r = cuMemcpyHtoDAsync(d1.ptr(), h1.get(), bytes, s);
    return r == CUDA_SUCCESS ? cuMemcpyDtoHAsync(h2.get(), d2.ptr(), bytes, s) : r;
  };
  warm_up(copies, {s.get()});
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_CU(copies());
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_GE(wall_ms_since(t0), 0.9 * (modeled_ms(bytes, h2d_) + modeled_ms(bytes, d2h_)));
}

// --- kernels -----------------------------------------------------------------

namespace {

constexpr unsigned long long kModeledNs = 50'000'000;  // 50 ms
constexpr const char* kModeledKernel = "simdev_test_modeled_50ms";

void modeled_kernel(const simdev_launch*) {}

class SimdevModeledKernel : public SimdevTest {
 protected:
  void SetUp() override {
    SimdevTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    static const size_t sizes[] = {8};
    const simdev_kernel_desc desc = {kModeledKernel, modeled_kernel, 1, sizes, nullptr, kModeledNs};
    ASSERT_EQ(0, simdev_try_register_kernel(&desc));
    ASSERT_CU(load_any_module(&module_));
    ASSERT_CU(cuModuleGetFunction(&fn_, module_, kModeledKernel));
  }
  void TearDown() override {
    if (module_) cuModuleUnload(module_);
    SimdevTest::TearDown();
  }
  CUresult launch(CUstream s) {
    unsigned long long unused = 0;
    void* params[] = {&unused};
    return cuLaunchKernel(fn_, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
  }
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
};

}  // namespace

TEST_F(SimdevModeledKernel, KernelTakesItsModeledDuration) {
  Stream s;
  ASSERT_CU(s.status());
  Event start, stop;
  ASSERT_CU(start.status());
  ASSERT_CU(stop.status());
  ASSERT_CU(cuEventRecord(start, s));
  ASSERT_CU(launch(s));
  ASSERT_CU(launch(s));
  ASSERT_CU(cuEventRecord(stop, s));
  EXPECT_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(s));
  ASSERT_CU(cuEventSynchronize(stop));
  float ms = 0;
  ASSERT_CU(cuEventElapsedTime(&ms, start, stop));
  EXPECT_GE(ms, 0.95 * 2 * kModeledNs / 1e6);  // two launches in one stream
}

TEST_F(SimdevModeledKernel, LaunchReturnsBeforeTheModeledDuration) {
  Stream s;
  ASSERT_CU(s.status());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_CU(launch(s));
  const double enqueue_ms = wall_ms_since(t0);
  EXPECT_EQ(CUDA_ERROR_NOT_READY, cuStreamQuery(s));
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_GE(wall_ms_since(t0), 0.95 * kModeledNs / 1e6);
  EXPECT_LT(enqueue_ms, kModeledNs / 1e6);  // asynchronous
}

namespace {

// The calling thread's voluntary context switches so far (each time it slept).
long voluntary_switches() {
  std::ifstream status("/proc/thread-self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(line.find(':') + 1));
  return -1;
}

}  // namespace

// A thread waiting for a stream's earlier work sleeps until that work
// completes: the launches queued behind it meanwhile do not wake it (a GPU's
// launch wakes no host thread). With one condition variable for "work
// queued" and "work done", each launch woke every such waiter, which slept
// again: a system call per launch on the launching thread.
TEST_F(SimdevModeledKernel, ALaunchDoesNotWakeAThreadWaitingForEarlierWork) {
  Stream s;
  ASSERT_CU(s.status());
  CUcontext ctx = nullptr;
  ASSERT_CU(cuCtxGetCurrent(&ctx));
  const simdev_kernel_desc noop_desc = {"simdev_test_noop", modeled_kernel, 0, nullptr, nullptr, 0};
  ASSERT_EQ(0, simdev_try_register_kernel(&noop_desc));
  CUmodule noop_module = nullptr;
  CUfunction noop = nullptr;
  ASSERT_CU(load_any_module(&noop_module));
  ASSERT_CU(cuModuleGetFunction(&noop, noop_module, "simdev_test_noop"));
  ASSERT_CU(launch(s));  // 50 ms
  std::atomic<bool> waiting{false};
  long slept = -1;
  CUresult synced = CUDA_ERROR_UNKNOWN;
  std::thread waiter([&] {
    cuCtxSetCurrent(ctx);
    Event first;
    if (first.status() != CUDA_SUCCESS || cuEventRecord(first, s) != CUDA_SUCCESS) return;
    const long before = voluntary_switches();
    waiting.store(true);
    synced = cuEventSynchronize(first);  // the 50 ms kernel only
    slept = voluntary_switches() - before;
  });
  while (!waiting.load()) std::this_thread::yield();
  // Launches behind it while it waits, spaced so that a waiter woken by one
  // would be asleep again before the next.
  for (int i = 0; i < 100; ++i) {
    ASSERT_CU(cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr));
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  waiter.join();
  ASSERT_CU(synced);
  EXPECT_GE(slept, 0);
  EXPECT_LT(slept, 20) << "the waiter was woken by the launches behind what it waits for";
  ASSERT_CU(cuStreamSynchronize(s));
  cuModuleUnload(noop_module);
}

TEST_F(SimdevModeledKernel, KernelsInDifferentStreamsOverlap) {
  Stream a, b;
  ASSERT_CU(a.status());
  ASSERT_CU(b.status());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_CU(launch(a));
  ASSERT_CU(launch(b));
  ASSERT_CU(cuStreamSynchronize(a));
  ASSERT_CU(cuStreamSynchronize(b));
  const double ms = wall_ms_since(t0);
  EXPECT_GE(ms, 0.95 * kModeledNs / 1e6);
  EXPECT_LT(ms, 0.85 * 2 * kModeledNs / 1e6) << "streams did not run concurrently";
}
