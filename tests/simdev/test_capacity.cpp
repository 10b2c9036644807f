// Device capacity (SIMDEV_MEM) and where physical memory is counted.
#include <algorithm>
#include <cstring>
#include <vector>

#include "simdev_test.h"

using contract::DeviceBuffer;
using contract::Stream;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

CUmemAllocationProp prop_for(CUmemLocationType type, int id) {
  CUmemAllocationProp p;
  std::memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = type;
  p.location.id = id;
  return p;
}

CUmemAccessDesc device_rw(int dev) {
  CUmemAccessDesc acc{};
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = dev;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return acc;
}

size_t granularity(const CUmemAllocationProp& p) {
  size_t g = 0;
  EXPECT_CU(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  return g;
}

size_t free_bytes() {
  size_t f = 0, t = 0;
  EXPECT_CU(cuMemGetInfo(&f, &t));
  return f;
}

}  // namespace

// Runs under the meson entries that set SIMDEV_MEM (with and without a unit)
// and SIMDEV_TEST_EXPECT_TOTAL to the bytes it means.
TEST_F(SimdevTest, Env_SimdevMemSetsTheEnforcedCapacity) {
  const std::string expect = env_or_empty("SIMDEV_TEST_EXPECT_TOTAL");
  if (expect.empty()) GTEST_SKIP() << "needs SIMDEV_MEM and SIMDEV_TEST_EXPECT_TOTAL";
  const size_t want = std::stoull(expect);
  size_t f = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&f, &total));
  EXPECT_EQ(want, total) << "SIMDEV_MEM=" << env_or_empty("SIMDEV_MEM");
  EXPECT_EQ(total - f, sim().device_bytes_in_use());

  CUdeviceptr p = 0;
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, total + kMiB));
  // Fill the device in 1/8 chunks: at most 8 fit, and nearly all of it is usable.
  std::vector<DeviceBuffer> held;
  for (int i = 0; i < 16; ++i) {
    DeviceBuffer b(total / 8);
    if (b.status() != CUDA_SUCCESS) {
      EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, b.status());
      break;
    }
    held.push_back(std::move(b));
  }
  EXPECT_GE(held.size(), 7u);
  EXPECT_LE(held.size(), 8u);
  EXPECT_LE(sim().device_bytes_in_use(), total);
  held.clear();
  DeviceBuffer after(total / 2);
  EXPECT_CU(after.status());
}

TEST_F(SimdevTest, DeviceBytesInUseTracksAllocations) {
  const unsigned long long before = sim().device_bytes_in_use();
  const size_t f0 = free_bytes();
  {
    DeviceBuffer d(64 * kMiB);
    ASSERT_CU(d.status());
    EXPECT_GE(sim().device_bytes_in_use(), before + 64 * kMiB);
    EXPECT_LE(free_bytes(), f0 - 64 * kMiB);
  }
  EXPECT_EQ(before, sim().device_bytes_in_use());
  EXPECT_EQ(f0, free_bytes());
}

TEST_F(SimdevTest, AsyncAllocationsCountAgainstCapacity) {
  Stream s;
  ASSERT_CU(s.status());
  const unsigned long long before = sim().device_bytes_in_use();
  CUdeviceptr p = 0;
  ASSERT_CU(cuMemAllocAsync(&p, 32 * kMiB, s));
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_GE(sim().device_bytes_in_use(), before + 32 * kMiB);
  ASSERT_CU(cuMemFreeAsync(p, s));
  ASSERT_CU(cuStreamSynchronize(s));
  size_t f = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&f, &total));
  CUdeviceptr big = 0;
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocAsync(&big, total + kMiB, s));
}

TEST_F(SimdevTest, DeviceHandlesCountAgainstCapacity) {
  CUmemAllocationProp dp = prop_for(CU_MEM_LOCATION_TYPE_DEVICE, device());
  const size_t g = granularity(dp);
  const unsigned long long dev0 = sim().device_bytes_in_use();
  const unsigned long long host0 = sim().host_bytes_in_use();
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemCreate(&h, 16 * g, &dp, 0));
  EXPECT_EQ(dev0 + 16 * g, sim().device_bytes_in_use());
  EXPECT_EQ(host0, sim().host_bytes_in_use());
  ASSERT_CU(cuMemRelease(h));
  EXPECT_EQ(dev0, sim().device_bytes_in_use());

  size_t f = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&f, &total));
  const size_t too_big = (total / g + 1) * g;
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemCreate(&h, too_big, &dp, 0));
}

TEST_F(SimdevTest, HostHandlesDoNotCountAgainstTheDevice) {
  CUmemAllocationProp hp = prop_for(CU_MEM_LOCATION_TYPE_HOST, 0);
  const size_t g = granularity(hp);
  const unsigned long long dev0 = sim().device_bytes_in_use();
  const unsigned long long host0 = sim().host_bytes_in_use();
  const size_t f0 = free_bytes();
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemCreate(&h, 32 * g, &hp, 0));
  EXPECT_EQ(dev0, sim().device_bytes_in_use());
  EXPECT_EQ(host0 + 32 * g, sim().host_bytes_in_use());
  EXPECT_EQ(f0, free_bytes());
  ASSERT_CU(cuMemRelease(h));
  EXPECT_EQ(host0, sim().host_bytes_in_use());

  CUmemAllocationProp np = prop_for(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
  ASSERT_CU(cuMemCreate(&h, 8 * g, &np, 0));
  EXPECT_EQ(dev0, sim().device_bytes_in_use());
  EXPECT_EQ(host0 + 8 * g, sim().host_bytes_in_use());
  ASSERT_CU(cuMemRelease(h));
}

TEST_F(SimdevTest, HostHandleMayExceedDeviceCapacity) {
  CUmemAllocationProp hp = prop_for(CU_MEM_LOCATION_TYPE_HOST, 0);
  const size_t g = granularity(hp);
  size_t f = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&f, &total));
  const size_t bytes = (total / g + 2) * g;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemCreate(&h, bytes, &hp, 0));  // never touched: costs address space only
  EXPECT_CU(cuMemRelease(h));
}

// Spilling by remap frees device capacity while the VA keeps working.
TEST_F(SimdevTest, RemapToHostReturnsDeviceCapacity) {
  CUmemAllocationProp dp = prop_for(CU_MEM_LOCATION_TYPE_DEVICE, device());
  CUmemAllocationProp hp = prop_for(CU_MEM_LOCATION_TYPE_HOST, 0);
  const size_t g = std::max(granularity(dp), granularity(hp));
  const size_t size = 8 * g;
  const unsigned long long dev0 = sim().device_bytes_in_use();
  CUdeviceptr va = 0;
  ASSERT_CU(cuMemAddressReserve(&va, size, g, 0, 0));
  EXPECT_EQ(dev0, sim().device_bytes_in_use());  // a reservation costs nothing

  const CUmemAccessDesc acc = device_rw(device());
  CUmemGenericAllocationHandle dh = 0, hh = 0;
  ASSERT_CU(cuMemCreate(&dh, size, &dp, 0));
  ASSERT_CU(cuMemMap(va, size, 0, dh, 0));
  ASSERT_CU(cuMemSetAccess(va, size, &acc, 1));
  ASSERT_CU(cuMemsetD32(va, 0x5eed5eedu, size / 4));
  EXPECT_EQ(dev0 + size, sim().device_bytes_in_use());

  std::vector<unsigned char> staging(size);
  ASSERT_CU(cuMemcpyDtoH(staging.data(), va, size));
  ASSERT_CU(cuMemUnmap(va, size));
  ASSERT_CU(cuMemRelease(dh));
  EXPECT_EQ(dev0, sim().device_bytes_in_use());

  ASSERT_CU(cuMemCreate(&hh, size, &hp, 0));
  ASSERT_CU(cuMemMap(va, size, 0, hh, 0));
  ASSERT_CU(cuMemSetAccess(va, size, &acc, 1));
  ASSERT_CU(cuMemcpyHtoD(va, staging.data(), size));
  EXPECT_EQ(dev0, sim().device_bytes_in_use());
  uint32_t w = 0;
  ASSERT_CU(cuMemcpyDtoH(&w, va + size - 4, 4));
  EXPECT_EQ(0x5eed5eedu, w);
  ASSERT_CU(cuMemUnmap(va, size));
  ASSERT_CU(cuMemRelease(hh));
  ASSERT_CU(cuMemAddressFree(va, size));
}

// A chunk unmapped and mapped again at its VA (a tiering allocator's fetch
// into a spare) keeps its bytes, whether its access was granted in between
// or not; another chunk mapped there shows its own. simdev keeps an unmapped
// chunk's page tables off the VA (a ghost) and brings them back with the
// access: none of that may show.
TEST_F(SimdevTest, MemoryMappedAgainAtItsVaKeepsItsBytes) {
  CUmemAllocationProp dp = prop_for(CU_MEM_LOCATION_TYPE_DEVICE, device());
  const size_t g = granularity(dp);
  const size_t size = 8 * g;
  CUdeviceptr va = 0;
  ASSERT_CU(cuMemAddressReserve(&va, size, g, 0, 0));
  const CUmemAccessDesc acc = device_rw(device());
  CUmemGenericAllocationHandle a = 0, b = 0;
  ASSERT_CU(cuMemCreate(&a, size, &dp, 0));
  ASSERT_CU(cuMemCreate(&b, size, &dp, 0));
  auto map = [&](CUmemGenericAllocationHandle h, bool grant) {
    ASSERT_CU(cuMemMap(va, size, 0, h, 0));
    if (grant) {
      ASSERT_CU(cuMemSetAccess(va, size, &acc, 1));
    }
  };
  auto last_word = [&] {
    uint32_t w = 0;
    EXPECT_CU(cuMemcpyDtoH(&w, va + size - 4, 4));
    return w;
  };
  map(b, true);
  ASSERT_CU(cuMemsetD32(va, 0xbbbbbbbbu, size / 4));
  ASSERT_CU(cuCtxSynchronize());  // a memset may still be queued: unmapping under it would fault it
  ASSERT_CU(cuMemUnmap(va, size));
  map(a, true);
  ASSERT_CU(cuMemsetD32(va, 0xaaaaaaaau, size / 4));
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuMemUnmap(va, size));
  map(a, true);
  EXPECT_EQ(0xaaaaaaaau, last_word()) << "mapped again, access granted";
  ASSERT_CU(cuMemUnmap(va, size));
  map(a, false);  // unmapped again before any access was granted
  ASSERT_CU(cuMemUnmap(va, size));
  map(a, true);
  EXPECT_EQ(0xaaaaaaaau, last_word()) << "mapped twice more, access granted only the second time";
  ASSERT_CU(cuMemUnmap(va, size));
  map(b, true);
  EXPECT_EQ(0xbbbbbbbbu, last_word()) << "another chunk at the VA";
  ASSERT_CU(cuMemUnmap(va, size));
  ASSERT_CU(cuMemRelease(b));
  map(a, true);
  EXPECT_EQ(0xaaaaaaaau, last_word());
  ASSERT_CU(cuMemUnmap(va, size));
  ASSERT_CU(cuMemRelease(a));
  ASSERT_CU(cuMemAddressFree(va, size));
}
