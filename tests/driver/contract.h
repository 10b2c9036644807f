// Shared setup for the driver-contract tests: the process-wide CUDA session
// (cuInit, primary context, the test kernels), a fixture, small RAII holders
// and a helper for checks that must run in a fresh process.
//
// Everything here uses <cuda.h> only, so the tests run unchanged against
// NVIDIA's driver. On simdev the kernels resolve to the host versions
// registered by register_contract_host_kernels().
#pragma once

#include <cuda.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ostream>
#include <string>
#include <utility>

// Prints a CUresult by name in assertion messages.
void PrintTo(CUresult r, std::ostream* os);

#define ASSERT_CU(expr) ASSERT_EQ(CUDA_SUCCESS, (expr))
#define EXPECT_CU(expr) EXPECT_EQ(CUDA_SUCCESS, (expr))

namespace contract {

// Registers the host implementations of the kernels in kernels.cu with simdev
// (a no-op on NVIDIA's driver). Idempotent.
void register_contract_host_kernels();

// The kernels of kernels.cu, all grid-stride loops over n elements.
struct Kernels {
  CUmodule module = nullptr;
  CUfunction fill_u32 = nullptr;     // (u32* p, u32 value, u64 n)
  CUfunction add_one_u32 = nullptr;  // (u32* p, u64 n)
  // (u32* p0, ..., u32* p7): the first kAddOneX8Words words of each, atomically
  CUfunction add_one_u32x8 = nullptr;
  CUfunction copy_bytes = nullptr;   // (u8* dst, const u8* src, u64 n)
  CUfunction sum_u32 = nullptr;      // (const u32* p, u64 n, u64* acc)
  // (u32* const* table, u64 count, u32 value, u64 n): through a device-side table
  CUfunction fill_table_u32 = nullptr;
  // (volatile u32* flags, u32* p, u32 value, u64 n): sets flags[1], waits for
  // flags[0] (flags[2] = 1 when it gave up after ~10 s), fills p; launch 1 block
  CUfunction wait_then_fill_u32 = nullptr;
};

inline constexpr const char* kFillU32 = "contract_fill_u32";
inline constexpr const char* kAddOneU32 = "contract_add_one_u32";
inline constexpr const char* kAddOneU32x8 = "contract_add_one_u32x8";
inline constexpr uint64_t kAddOneX8Words = 64;
inline constexpr const char* kCopyBytes = "contract_copy_bytes";
inline constexpr const char* kSumU32 = "contract_sum_u32";
inline constexpr const char* kFillTableU32 = "contract_fill_table_u32";
inline constexpr const char* kWaitThenFillU32 = "contract_wait_then_fill_u32";

// The PTX image of kernels.cu.
const char* kernels_image();

struct Session {
  CUdevice device = 0;
  CUcontext context = nullptr;  // the primary context, retained for the process
  Kernels kernels;
};

// Creates the process-wide session on first use. On failure returns the
// failing call's result and leaves *out untouched.
CUresult session(const Session** out);

// Launch shape for n elements: 256 threads, enough blocks (capped; the
// kernels loop).
inline unsigned int blocks_for(uint64_t n) {
  uint64_t b = (n + 255) / 256;
  if (b == 0) b = 1;
  return static_cast<unsigned int>(b > 1024 ? 1024 : b);
}

// Launches f with the given arguments (exact parameter types required).
template <class... Args>
CUresult launch(CUfunction f, CUstream stream, uint64_t n, Args... args) {
  void* params[] = {static_cast<void*>(&args)...};
  return cuLaunchKernel(f, blocks_for(n), 1, 1, 256, 1, 1, 0, stream, params, nullptr);
}

CUresult fill_u32(const Kernels& k, CUstream s, CUdeviceptr p, uint32_t value, uint64_t n);
CUresult add_one_u32(const Kernels& k, CUstream s, CUdeviceptr p, uint64_t n);
// One launch naming the eight buffers.
CUresult add_one_u32x8(const Kernels& k, CUstream s, const CUdeviceptr (&p)[8]);
CUresult copy_bytes(const Kernels& k, CUstream s, CUdeviceptr dst, CUdeviceptr src, uint64_t n);
CUresult sum_u32(const Kernels& k, CUstream s, CUdeviceptr p, uint64_t n, CUdeviceptr acc);

// Device memory from cuMemAlloc, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : size_(bytes) { status_ = cuMemAlloc(&ptr_, bytes); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(size_, o.size_);
    std::swap(status_, o.status_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cuMemFree(ptr_);
  }
  CUresult status() const { return status_; }
  CUdeviceptr ptr() const { return ptr_; }
  size_t size() const { return size_; }
  CUresult release() {
    CUresult r = ptr_ ? cuMemFree(ptr_) : CUDA_SUCCESS;
    ptr_ = 0;
    return r;
  }

 private:
  CUdeviceptr ptr_ = 0;
  size_t size_ = 0;
  CUresult status_ = CUDA_ERROR_NOT_INITIALIZED;
};

// Page-locked host memory from cuMemHostAlloc, freed on destruction.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes, unsigned int flags = 0) : size_(bytes) {
    status_ = cuMemHostAlloc(&ptr_, bytes, flags);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_) cuMemFreeHost(ptr_);
  }
  CUresult status() const { return status_; }
  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
  CUresult status_ = CUDA_ERROR_NOT_INITIALIZED;
};

class Stream {
 public:
  explicit Stream(unsigned int flags = CU_STREAM_NON_BLOCKING) {
    status_ = cuStreamCreate(&s_, flags);
  }
  Stream(unsigned int flags, int priority) {
    status_ = cuStreamCreateWithPriority(&s_, flags, priority);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (s_) cuStreamDestroy(s_);
  }
  CUresult status() const { return status_; }
  CUstream get() const { return s_; }
  operator CUstream() const { return s_; }

 private:
  CUstream s_ = nullptr;
  CUresult status_ = CUDA_ERROR_NOT_INITIALIZED;
};

class Event {
 public:
  explicit Event(unsigned int flags = CU_EVENT_DEFAULT) { status_ = cuEventCreate(&e_, flags); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (e_) cuEventDestroy(e_);
  }
  CUresult status() const { return status_; }
  CUevent get() const { return e_; }
  operator CUevent() const { return e_; }

 private:
  CUevent e_ = nullptr;
  CUresult status_ = CUDA_ERROR_NOT_INITIALIZED;
};

// A host function that holds its stream until open() is called (or 10 s
// pass, so that a failing test cannot hang). Keep the Gate alive until the
// stream has been synchronised.
class Gate {
 public:
  CUresult enqueue(CUstream s) { return cuLaunchHostFunc(s, &Gate::run, this); }
  void open() { open_.store(true); }
  bool entered() const { return entered_.load(); }
  bool timed_out() const { return timed_out_.load(); }

 private:
  static void CUDA_CB run(void* self);
  std::atomic<bool> open_{false};
  std::atomic<bool> entered_{false};
  std::atomic<bool> timed_out_{false};
};

// Polls cuStreamQuery until the stream is idle or timeout_ms pass; returns
// the last result.
CUresult wait_idle(CUstream s, int timeout_ms);

// Runs fn in a fresh process (this test binary re-executed, so CUDA is
// initialised from scratch there; a driver is not fork-safe) and expects it
// to return 0. fn reports what went wrong on stderr.
template <class Fn>
void expect_child_returns_zero(Fn fn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(fn()), ::testing::ExitedWithCode(0), "");
}

// Reports a CUresult mismatch from a child process; returns code.
int child_fail(int code, const char* what, CUresult got, CUresult want);

}  // namespace contract

// Fixture: the session's primary context is current on the test thread.
class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  CUdevice device() const { return s_->device; }
  CUcontext context() const { return s_->context; }
  const contract::Kernels& kernels() const { return s_->kernels; }
  int attribute(CUdevice_attribute a) const;
  // cuMemGetInfo's total: scales capacity tests to the device.
  size_t total_memory() const;

 private:
  const contract::Session* s_ = nullptr;
};
