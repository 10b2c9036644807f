// What a kernel may touch, and when touching the wrong memory is an error.
// A launch never looks at its parameter values: a word naming freed memory is
// fine as long as the kernel does not dereference it. A kernel may reach any
// mapped device memory, also through pointers it reads from device memory.
// Only an access to memory that is not mapped faults, when it happens: the
// launch itself succeeds, the context gets the sticky
// CUDA_ERROR_ILLEGAL_ADDRESS, and the next synchronising call reports it.
// Cases that fault run in a fresh process, since the error poisons the
// context.
#include <cstring>
#include <thread>
#include <vector>

#include "contract.h"

using contract::child_fail;
using contract::DeviceBuffer;
using contract::expect_child_returns_zero;
using contract::PinnedBuffer;

namespace {

// A granule of device memory mapped read-write at a reserved VA; unmap() takes
// the mapping away again.
class MappedGranule {
 public:
  explicit MappedGranule(CUdevice dev) {
    CUmemAllocationProp prop;
    std::memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    if ((status_ = cuMemGetAllocationGranularity(&size_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM))) return;
    if ((status_ = cuMemAddressReserve(&va_, size_, size_, 0, 0))) return;
    if ((status_ = cuMemCreate(&handle_, size_, &prop, 0))) return;
    if ((status_ = cuMemMap(va_, size_, 0, handle_, 0))) return;
    mapped_ = true;
    CUmemAccessDesc access;
    std::memset(&access, 0, sizeof access);
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = dev;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    status_ = cuMemSetAccess(va_, size_, &access, 1);
  }
  MappedGranule(const MappedGranule&) = delete;
  MappedGranule& operator=(const MappedGranule&) = delete;
  CUresult unmap() {
    mapped_ = false;
    return cuMemUnmap(va_, size_);
  }
  CUresult status() const { return status_; }
  CUdeviceptr va() const { return va_; }
  size_t size() const { return size_; }

 private:
  CUresult status_ = CUDA_ERROR_NOT_INITIALIZED;
  CUdeviceptr va_ = 0;
  size_t size_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
  bool mapped_ = false;
};

CUresult fill_table(const contract::Kernels& k, CUdeviceptr table, uint64_t count, uint32_t value, uint64_t n) {
  return contract::launch(k.fill_table_u32, nullptr, count * n, table, count, value, n);
}

// The launch succeeded; the fault shows at the next synchronising call and
// stays.
int expect_fault_after_successful_launch(CUresult launch, const char* what) {
  if (launch != CUDA_SUCCESS) return child_fail(20, what, launch, CUDA_SUCCESS);
  const CUresult sync = cuCtxSynchronize();
  if (sync != CUDA_ERROR_ILLEGAL_ADDRESS) return child_fail(21, "cuCtxSynchronize", sync, CUDA_ERROR_ILLEGAL_ADDRESS);
  const CUresult again = cuCtxSynchronize();
  if (again != CUDA_ERROR_ILLEGAL_ADDRESS)
    return child_fail(22, "cuCtxSynchronize again (sticky)", again, CUDA_ERROR_ILLEGAL_ADDRESS);
  CUdeviceptr p = 0;
  const CUresult alloc = cuMemAlloc(&p, 4096);
  if (alloc != CUDA_ERROR_ILLEGAL_ADDRESS)
    return child_fail(23, "cuMemAlloc after the fault (sticky)", alloc, CUDA_ERROR_ILLEGAL_ADDRESS);
  return 0;
}

}  // namespace

TEST_F(DriverTest, StaleParameterWordsLaunchFine) {
  expect_child_returns_zero([this] {
    // Parameters naming freed memory that the kernel never dereferences.
    CUdeviceptr stale = 0;
    if (CUresult r = cuMemAlloc(&stale, 1 << 20)) return child_fail(1, "cuMemAlloc", r, CUDA_SUCCESS);
    if (CUresult r = cuMemFree(stale)) return child_fail(2, "cuMemFree", r, CUDA_SUCCESS);
    if (CUresult r = contract::fill_u32(kernels(), nullptr, stale, 1u, 0))
      return child_fail(3, "launch naming freed memory, n = 0", r, CUDA_SUCCESS);
    if (CUresult r = contract::copy_bytes(kernels(), nullptr, stale, stale + 4096, 0))
      return child_fail(4, "launch naming freed memory twice, n = 0", r, CUDA_SUCCESS);
    if (CUresult r = cuCtxSynchronize()) return child_fail(5, "cuCtxSynchronize", r, CUDA_SUCCESS);
    // The context is healthy: real work still runs.
    DeviceBuffer d(4096);
    if (d.status()) return child_fail(6, "cuMemAlloc", d.status(), CUDA_SUCCESS);
    if (CUresult r = contract::fill_u32(kernels(), nullptr, d.ptr(), 5u, 1024)) return child_fail(7, "fill", r, CUDA_SUCCESS);
    uint32_t last = 0;
    if (CUresult r = cuMemcpyDtoH(&last, d.ptr() + 4 * 1023, 4)) return child_fail(8, "cuMemcpyDtoH", r, CUDA_SUCCESS);
    return last == 5u ? 0 : 9;
  });
}

TEST_F(DriverTest, KernelTouchingFreedMemoryFaultsAfterASuccessfulLaunch) {
  expect_child_returns_zero([this] {
    const size_t bytes = 64 << 20;
    CUdeviceptr p = 0;
    if (CUresult r = cuMemAlloc(&p, bytes)) return child_fail(1, "cuMemAlloc", r, CUDA_SUCCESS);
    if (CUresult r = cuMemFree(p)) return child_fail(2, "cuMemFree", r, CUDA_SUCCESS);
    return expect_fault_after_successful_launch(contract::fill_u32(kernels(), nullptr, p, 1u, 1024),
                                                "launch touching freed memory");
  });
}

// Every parameter is a pointer the kernel dereferences; two parameters may
// name the same memory (its words are added to twice).
TEST_F(DriverTest, KernelWritesThroughEachOfEightPointerParameters) {
  std::vector<DeviceBuffer> buffers;
  for (int i = 0; i < 7; ++i) {
    buffers.emplace_back(contract::kAddOneX8Words * 4);
    ASSERT_CU(buffers.back().status());
    ASSERT_CU(cuMemsetD32(buffers.back().ptr(), 0, contract::kAddOneX8Words));
  }
  CUdeviceptr p[8];
  for (int i = 0; i < 7; ++i) p[i] = buffers[i].ptr();
  p[7] = p[2];
  for (int launch = 0; launch < 3; ++launch) ASSERT_CU(contract::add_one_u32x8(kernels(), nullptr, p));
  ASSERT_CU(cuCtxSynchronize());
  for (int b = 0; b < 7; ++b) {
    std::vector<uint32_t> words(contract::kAddOneX8Words);
    ASSERT_CU(cuMemcpyDtoH(words.data(), buffers[b].ptr(), words.size() * 4));
    for (uint32_t w : words) ASSERT_EQ(b == 2 ? 6u : 3u, w) << "buffer " << b;
  }
}

TEST_F(DriverTest, KernelReachesMemoryThroughAPointerTable) {
  const uint64_t count = 3, n = 4096;
  std::vector<DeviceBuffer> buffers;
  std::vector<CUdeviceptr> table_host;
  for (uint64_t i = 0; i < count; ++i) {
    buffers.emplace_back(n * 4);
    ASSERT_CU(buffers.back().status());
    ASSERT_CU(cuMemsetD32(buffers.back().ptr(), 0, n));
    table_host.push_back(buffers.back().ptr());
  }
  DeviceBuffer table(count * sizeof(CUdeviceptr));
  ASSERT_CU(table.status());
  ASSERT_CU(cuMemcpyHtoD(table.ptr(), table_host.data(), count * sizeof(CUdeviceptr)));
  ASSERT_CU(fill_table(kernels(), table.ptr(), count, 0xabcd1234u, n));
  ASSERT_CU(cuCtxSynchronize());
  for (const DeviceBuffer& b : buffers) {
    std::vector<uint32_t> words(n);
    ASSERT_CU(cuMemcpyDtoH(words.data(), b.ptr(), n * 4));
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(0xabcd1234u, words[i]) << i;
  }
}

TEST_F(DriverTest, KernelFaultsThroughAPointerTableNamingUnmappedMemory) {
  expect_child_returns_zero([this] {
    MappedGranule mapped(device());
    if (mapped.status()) return child_fail(1, "map a granule", mapped.status(), CUDA_SUCCESS);
    DeviceBuffer ok(4096);
    if (ok.status()) return child_fail(2, "cuMemAlloc", ok.status(), CUDA_SUCCESS);
    // The launch names only the table; the second entry points at a granule
    // that was mapped when the table was written and is not any more.
    const CUdeviceptr entries[2] = {ok.ptr(), mapped.va()};
    DeviceBuffer table(sizeof entries);
    if (table.status()) return child_fail(3, "cuMemAlloc", table.status(), CUDA_SUCCESS);
    if (CUresult r = cuMemcpyHtoD(table.ptr(), entries, sizeof entries)) return child_fail(4, "cuMemcpyHtoD", r, CUDA_SUCCESS);
    if (CUresult r = mapped.unmap()) return child_fail(5, "cuMemUnmap", r, CUDA_SUCCESS);
    return expect_fault_after_successful_launch(fill_table(kernels(), table.ptr(), 2, 7u, 1024),
                                                "launch reaching unmapped memory through a table");
  });
}

TEST_F(DriverTest, KernelRunningWhileItsMemoryIsUnmappedFaultsAtItsNextAccess) {
  expect_child_returns_zero([this] {
    MappedGranule mapped(device());
    if (mapped.status()) return child_fail(1, "map a granule", mapped.status(), CUDA_SUCCESS);
    // Host memory the device can read: the kernel's go signal and its "I run".
    PinnedBuffer flags(4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
    if (flags.status()) return child_fail(2, "cuMemHostAlloc", flags.status(), CUDA_SUCCESS);
    // Atomic on the host side too: on simdev the kernel is a host thread.
    auto* f = flags.as<uint32_t>();
    for (int i = 0; i < 3; ++i) __atomic_store_n(&f[i], 0u, __ATOMIC_RELEASE);
    auto flag = [f](int i) { return __atomic_load_n(&f[i], __ATOMIC_ACQUIRE); };
    CUdeviceptr flags_dev = 0;
    if (CUresult r = cuMemHostGetDevicePointer(&flags_dev, flags.get(), 0))
      return child_fail(3, "cuMemHostGetDevicePointer", r, CUDA_SUCCESS);
    contract::Stream s;
    if (s.status()) return child_fail(4, "cuStreamCreate", s.status(), CUDA_SUCCESS);
    CUdeviceptr p = mapped.va();
    uint32_t value = 9;
    uint64_t n = 1024;
    void* params[] = {&flags_dev, &p, &value, &n};
    if (CUresult r = cuLaunchKernel(kernels().wait_then_fill_u32, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr))
      return child_fail(5, "launch", r, CUDA_SUCCESS);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (flag(1) == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    if (flag(1) == 0) return 6;  // the kernel never started
    if (CUresult r = mapped.unmap()) return child_fail(7, "cuMemUnmap under a running kernel", r, CUDA_SUCCESS);
    __atomic_store_n(&f[0], 1u, __ATOMIC_RELEASE);  // now the kernel writes into what is no longer mapped
    if (int failed = expect_fault_after_successful_launch(CUDA_SUCCESS, "kernel running across cuMemUnmap"))
      return failed;
    // The unmap did not wait for the kernel: it saw the signal given after it.
    return flag(2) == 0 ? 0 : 8;
  });
}
