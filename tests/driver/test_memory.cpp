// Device allocation, capacity and OOM, stream-ordered allocation, pinned and
// registered host memory, pointer attributes.
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "contract.h"

using contract::DeviceBuffer;
using contract::PinnedBuffer;
using contract::Stream;

namespace {
constexpr size_t kMiB = size_t{1} << 20;
}

TEST_F(DriverTest, MemGetInfoIsConsistent) {
  size_t free_bytes = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&free_bytes, &total));
  EXPECT_GT(total, 0u);
  EXPECT_LE(free_bytes, total);
}

TEST_F(DriverTest, AllocReducesFreeAndFreeRestoresIt) {
  const size_t bytes = 64 * kMiB;
  size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&free0, &total));
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAlloc(&p, bytes));
  ASSERT_CU(cuMemGetInfo(&free1, &total));
  EXPECT_GE(free0 - free1, bytes);
  ASSERT_CU(cuMemFree(p));
  ASSERT_CU(cuMemGetInfo(&free2, &total));
  EXPECT_GE(free2, free0 - 2 * kMiB);  // back to where it was, within a page
}

TEST_F(DriverTest, AllocIsAlignedAndUsable) {
  DeviceBuffer a(1000), b(3);
  ASSERT_CU(a.status());
  ASSERT_CU(b.status());
  EXPECT_NE(0u, a.ptr());
  EXPECT_EQ(0u, a.ptr() % 256);
  EXPECT_EQ(0u, b.ptr() % 256);
  EXPECT_NE(a.ptr(), b.ptr());
  std::vector<unsigned char> in(1000), out(1000);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 7);
  ASSERT_CU(cuMemcpyHtoD(a.ptr(), in.data(), in.size()));
  ASSERT_CU(cuMemcpyDtoH(out.data(), a.ptr(), out.size()));
  EXPECT_EQ(in, out);
}

TEST_F(DriverTest, AllocZeroBytesIsInvalidValue) {
  CUdeviceptr p = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(&p, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(nullptr, 4096));
}

TEST_F(DriverTest, AllocBeyondCapacityIsOutOfMemory) {
  CUdeviceptr p = 0;
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, total_memory() + total_memory() / 2));
  // The failure is not sticky.
  DeviceBuffer ok(kMiB);
  EXPECT_CU(ok.status());
}

TEST_F(DriverTest, OutOfMemoryAndRecoveryAfterFree) {
  // Chunks scale with the device: 1/8 of the total, so the loop ends after
  // a few allocations on a small simulated device and on a 141 GB H200 alike.
  const size_t chunk = total_memory() / 8;
  std::vector<DeviceBuffer> held;
  CUresult last = CUDA_SUCCESS;
  for (int i = 0; i < 16; ++i) {
    DeviceBuffer b(chunk);
    last = b.status();
    if (last != CUDA_SUCCESS) break;
    held.push_back(std::move(b));
  }
  ASSERT_EQ(CUDA_ERROR_OUT_OF_MEMORY, last);
  ASSERT_GE(held.size(), 4u);
  ASSERT_LE(held.size(), 8u);
  // Freeing one chunk makes room for exactly that chunk again.
  ASSERT_CU(held.back().release());
  held.pop_back();
  DeviceBuffer again(chunk);
  EXPECT_CU(again.status());
  // And the device is usable after OOM.
  ASSERT_CU(cuMemsetD8(again.ptr(), 0x5a, 4096));
  unsigned char byte = 0;
  ASSERT_CU(cuMemcpyDtoH(&byte, again.ptr() + 4095, 1));
  EXPECT_EQ(0x5a, byte);
}

TEST_F(DriverTest, AsyncAllocFreeInStreamOrder) {
  Stream s;
  ASSERT_CU(s.status());
  const size_t n = 1 << 16;
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAllocAsync(&p, n * 4, s));
  ASSERT_NE(0u, p);
  ASSERT_CU(contract::fill_u32(kernels(), s, p, 0xabcd1234u, n));
  PinnedBuffer host(n * 4);
  ASSERT_CU(host.status());
  ASSERT_CU(cuMemcpyDtoHAsync(host.get(), p, n * 4, s));
  ASSERT_CU(cuMemFreeAsync(p, s));
  ASSERT_CU(cuStreamSynchronize(s));
  for (size_t i = 0; i < n; i += 997) ASSERT_EQ(0xabcd1234u, host.as<uint32_t>()[i]) << i;
}

TEST_F(DriverTest, AsyncAllocCanReuseMemoryFreedEarlierInTheStream) {
  Stream s;
  ASSERT_CU(s.status());
  const size_t bytes = total_memory() / 4;
  for (int i = 0; i < 8; ++i) {  // 8 x 1/4 of the device: only works if frees are reused
    CUdeviceptr p = 0;
    ASSERT_CU(cuMemAllocAsync(&p, bytes, s)) << "iteration " << i;
    ASSERT_CU(cuMemsetD8Async(p, static_cast<unsigned char>(i), 4096, s));
    ASSERT_CU(cuMemFreeAsync(p, s));
  }
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAllocAsync(nullptr, 4096, s));
}

TEST_F(DriverTest, AsyncFreedMemoryReturnsToTheDeviceAtSynchronize) {
  // The default pool's release threshold is 0: memory freed in stream order
  // goes back to the device at the next synchronisation.
  Stream s;
  ASSERT_CU(s.status());
  const size_t bytes = total_memory() / 4;
  size_t f0 = 0, f1 = 0, f2 = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&f0, &total));
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAllocAsync(&p, bytes, s));
  ASSERT_CU(cuStreamSynchronize(s));
  ASSERT_CU(cuMemGetInfo(&f1, &total));
  EXPECT_GE(f0 - f1, bytes);
  ASSERT_CU(cuMemFreeAsync(p, s));
  ASSERT_CU(cuStreamSynchronize(s));
  ASSERT_CU(cuMemGetInfo(&f2, &total));
  EXPECT_GE(f2 + 2 * kMiB, f0);
}

TEST_F(DriverTest, PinnedHostAllocIsMappedForTheDevice) {
  const size_t n = 4096;
  PinnedBuffer host(n * 4, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
  ASSERT_CU(host.status());
  CUdeviceptr dp = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&dp, host.get(), 0));
  ASSERT_NE(0u, dp);
  ASSERT_CU(contract::fill_u32(kernels(), nullptr, dp, 77u, n));
  ASSERT_CU(cuCtxSynchronize());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(77u, host.as<uint32_t>()[i]) << i;

  unsigned int mem_type = 0;
  ASSERT_CU(cuPointerGetAttribute(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(host.get())));
  EXPECT_EQ(CU_MEMORYTYPE_HOST, mem_type);
  unsigned int flags = 0;
  ASSERT_CU(cuMemHostGetFlags(&flags, host.get()));
  EXPECT_TRUE(flags & CU_MEMHOSTALLOC_DEVICEMAP);
}

TEST_F(DriverTest, MemHostGetDevicePointerRejectsUnknownMemory) {
  int on_stack = 0;
  CUdeviceptr dp = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemHostGetDevicePointer(&dp, &on_stack, 0));
  PinnedBuffer host(4096);
  ASSERT_CU(host.status());
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            cuMemHostGetDevicePointer(&dp, host.get(), 1));  // flags must be 0
}

TEST_F(DriverTest, HostRegisterUnregister) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = 64 * page;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(MAP_FAILED, mem);
  auto* words = static_cast<uint32_t*>(mem);
  for (size_t i = 0; i < bytes / 4; ++i) words[i] = static_cast<uint32_t>(i);

  ASSERT_CU(cuMemHostRegister(mem, bytes, CU_MEMHOSTREGISTER_DEVICEMAP));
  EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, cuMemHostRegister(mem, bytes, 0));
  CUdeviceptr dp = 0;
  ASSERT_CU(cuMemHostGetDevicePointer(&dp, mem, 0));
  ASSERT_NE(0u, dp);

  // Async copies from registered memory, and a kernel through the mapping.
  Stream s;
  ASSERT_CU(s.status());
  DeviceBuffer d(bytes);
  ASSERT_CU(d.status());
  ASSERT_CU(cuMemcpyHtoDAsync(d.ptr(), mem, bytes, s));
  ASSERT_CU(contract::add_one_u32(kernels(), s, dp, bytes / 4));
  ASSERT_CU(cuStreamSynchronize(s));
  std::vector<uint32_t> back(bytes / 4);
  ASSERT_CU(cuMemcpyDtoH(back.data(), d.ptr(), bytes));
  for (size_t i = 0; i < back.size(); ++i) {
    ASSERT_EQ(static_cast<uint32_t>(i), back[i]) << i;
    ASSERT_EQ(static_cast<uint32_t>(i) + 1, words[i]) << i;
  }

  ASSERT_CU(cuMemHostUnregister(mem));
  EXPECT_EQ(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cuMemHostUnregister(mem));
  munmap(mem, bytes);
}

TEST_F(DriverTest, PointerAttributesOfInteriorPointer) {
  const size_t bytes = 4 * kMiB;
  DeviceBuffer d(bytes);
  ASSERT_CU(d.status());
  const CUdeviceptr interior = d.ptr() + 12345;

  CUdeviceptr start = 0;
  size_t size = 0;
  unsigned int type = 0;
  int ordinal = -1;
  ASSERT_CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, interior));
  ASSERT_CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, interior));
  ASSERT_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, interior));
  ASSERT_CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, interior));
  EXPECT_EQ(d.ptr(), start);
  EXPECT_EQ(bytes, size);
  EXPECT_EQ(CU_MEMORYTYPE_DEVICE, type);
  EXPECT_EQ(device(), ordinal);

  CUdeviceptr base = 0;
  size_t range = 0;
  ASSERT_CU(cuMemGetAddressRange(&base, &range, interior));
  EXPECT_EQ(d.ptr(), base);
  EXPECT_EQ(bytes, range);
}

TEST_F(DriverTest, PointerGetAttributesInOneCall) {
  DeviceBuffer d(2 * kMiB);
  ASSERT_CU(d.status());
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_MAPPED};
  unsigned int type = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  int mapped = 0;
  void* data[] = {&type, &start, &size, &mapped};
  ASSERT_CU(cuPointerGetAttributes(4, attrs, data, d.ptr() + 100));
  EXPECT_EQ(CU_MEMORYTYPE_DEVICE, type);
  EXPECT_EQ(d.ptr(), start);
  EXPECT_EQ(2 * kMiB, size);
  EXPECT_EQ(1, mapped);
}

TEST_F(DriverTest, PointerAttributeOfUnknownPointer) {
  int on_stack = 0;
  unsigned int type = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(&on_stack)));
  // The multi-attribute form answers instead of failing: memory type 0.
  CUpointer_attribute attr = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
  type = 12345;
  void* data[] = {&type};
  ASSERT_CU(cuPointerGetAttributes(1, &attr, data, reinterpret_cast<CUdeviceptr>(&on_stack)));
  EXPECT_EQ(0u, type);
}

// cuMemFree of memory not allocated stream-ordered may synchronise: work
// still using it finishes first, so memory handed out again afterwards
// cannot change what that work sees.
TEST_F(DriverTest, MemFreeLetsWorkStillUsingTheMemoryFinishFirst) {
  const size_t bytes = 1 << 20;
  Stream reader, writer;
  ASSERT_CU(reader.status());
  ASSERT_CU(writer.status());
  DeviceBuffer out(bytes);
  ASSERT_CU(out.status());
  CUdeviceptr x = 0;
  ASSERT_CU(cuMemAlloc(&x, bytes));
  ASSERT_CU(cuMemsetD8(x, 0x5a, bytes));
  ASSERT_CU(cuCtxSynchronize());
  contract::Gate gate;
  ASSERT_CU(gate.enqueue(reader));
  ASSERT_CU(contract::copy_bytes(kernels(), reader, out.ptr(), x, bytes));
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.open();
  });
  ASSERT_CU(cuMemFree(x));
  CUdeviceptr y = 0;
  ASSERT_CU(cuMemAlloc(&y, bytes));
  ASSERT_CU(cuMemsetD8Async(y, 0xee, bytes, writer));
  ASSERT_CU(cuStreamSynchronize(writer));
  ASSERT_CU(cuStreamSynchronize(reader));
  opener.join();
  EXPECT_FALSE(gate.timed_out());
  std::vector<unsigned char> got(bytes);
  ASSERT_CU(cuMemcpyDtoH(got.data(), out.ptr(), bytes));
  EXPECT_EQ(std::vector<unsigned char>(bytes, 0x5a), got);
  EXPECT_CU(cuMemFree(y));
}

// cuMemFreeAsync frees at its point in the stream: an allocation on another
// stream made before that point is reached never shares the memory with
// work still using it.
TEST_F(DriverTest, MemFreeAsyncReturnsTheMemoryAtItsPointInTheStream) {
  const size_t bytes = 1 << 20;
  Stream reader, writer;
  ASSERT_CU(reader.status());
  ASSERT_CU(writer.status());
  DeviceBuffer out(bytes);
  ASSERT_CU(out.status());
  CUdeviceptr x = 0;
  ASSERT_CU(cuMemAllocAsync(&x, bytes, reader));
  ASSERT_CU(cuMemsetD8Async(x, 0x5a, bytes, reader));
  ASSERT_CU(cuStreamSynchronize(reader));
  contract::Gate gate;
  ASSERT_CU(gate.enqueue(reader));
  ASSERT_CU(contract::copy_bytes(kernels(), reader, out.ptr(), x, bytes));
  ASSERT_CU(cuMemFreeAsync(x, reader));  // returns at once: the stream has not got there
  CUdeviceptr y = 0;
  ASSERT_CU(cuMemAllocAsync(&y, bytes, writer));
  ASSERT_CU(cuMemsetD8Async(y, 0xee, bytes, writer));
  gate.open();
  ASSERT_CU(cuStreamSynchronize(writer));
  ASSERT_CU(cuStreamSynchronize(reader));
  EXPECT_FALSE(gate.timed_out());
  std::vector<unsigned char> got(bytes);
  ASSERT_CU(cuMemcpyDtoH(got.data(), out.ptr(), bytes));
  EXPECT_EQ(std::vector<unsigned char>(bytes, 0x5a), got);
  std::vector<unsigned char> mine(bytes);
  ASSERT_CU(cuMemcpyDtoH(mine.data(), y, bytes));
  EXPECT_EQ(std::vector<unsigned char>(bytes, 0xee), mine);
  ASSERT_CU(cuMemFreeAsync(y, writer));
  ASSERT_CU(cuStreamSynchronize(writer));
}
