// Virtual memory management: granularity, reservations, physical handles on
// DEVICE, HOST and HOST_NUMA locations, map/unmap, access, handle queries,
// the device-to-host remap tierrt's remap mode is built on, and the errors
// for work that names an unmapped VA.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "contract.h"

using contract::child_fail;
using contract::DeviceBuffer;
using contract::expect_child_returns_zero;
using contract::PinnedBuffer;
using contract::Stream;

namespace {

CUmemAllocationProp prop_for(CUmemLocationType type, int id) {
  CUmemAllocationProp p;
  std::memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = type;
  p.location.id = id;
  return p;
}

size_t granularity(const CUmemAllocationProp& p,
                   CUmemAllocationGranularity_flags f = CU_MEM_ALLOC_GRANULARITY_MINIMUM) {
  size_t g = 0;
  EXPECT_CU(cuMemGetAllocationGranularity(&g, &p, f));
  return g;
}

CUmemAccessDesc device_rw(CUdevice dev) {
  CUmemAccessDesc d;
  std::memset(&d, 0, sizeof d);
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = dev;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

// A VA reservation, freed on destruction (after unmapping what is mapped).
class Reservation {
 public:
  Reservation(size_t size, size_t alignment) : size_(size) {
    status_ = cuMemAddressReserve(&va_, size, alignment, 0, 0);
  }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation() {
    if (!va_) return;
    cuCtxSynchronize();
    cuMemUnmap(va_, size_);  // fails harmlessly when nothing is mapped
    cuMemAddressFree(va_, size_);
  }
  CUresult status() const { return status_; }
  CUdeviceptr va() const { return va_; }
  size_t size() const { return size_; }

 private:
  CUdeviceptr va_ = 0;
  size_t size_;
  CUresult status_;
};

// A physical allocation handle, released on destruction.
class Physical {
 public:
  Physical(size_t size, const CUmemAllocationProp& prop) {
    status_ = cuMemCreate(&h_, size, &prop, 0);
  }
  Physical(const Physical&) = delete;
  Physical& operator=(const Physical&) = delete;
  ~Physical() { release(); }
  CUresult release() {
    CUresult r = h_ ? cuMemRelease(h_) : CUDA_SUCCESS;
    h_ = 0;
    return r;
  }
  CUresult status() const { return status_; }
  CUmemGenericAllocationHandle get() const { return h_; }

 private:
  CUmemGenericAllocationHandle h_ = 0;
  CUresult status_;
};

class VmmTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(1, attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED));
    dev_prop_ = prop_for(CU_MEM_LOCATION_TYPE_DEVICE, device());
    gran_ = granularity(dev_prop_);
    ASSERT_GT(gran_, 0u);
  }

  bool host_vmm() const {
    return attribute(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == 1;
  }
  bool host_numa_vmm() const {
    return attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == 1;
  }
  // The NUMA node to use for HOST_NUMA allocations: the device's nearest
  // node, or 0 where the system reports none.
  int numa_node() const { return std::max(0, attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID)); }

  // Maps handle at va and grants the device read/write access.
  CUresult map_rw(CUdeviceptr va, size_t size, const Physical& h) {
    CUresult r = cuMemMap(va, size, 0, h.get(), 0);
    if (r != CUDA_SUCCESS) return r;
    CUmemAccessDesc acc = device_rw(device());
    return cuMemSetAccess(va, size, &acc, 1);
  }

  // Fills [va, va+bytes) with words, checks them back through a copy.
  void expect_words(CUdeviceptr va, const std::vector<uint32_t>& want) {
    std::vector<uint32_t> got(want.size());
    ASSERT_CU(cuMemcpyDtoH(got.data(), va, got.size() * 4));
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(want[i], got[i]) << "word " << i;
  }

  CUmemAllocationProp dev_prop_;
  size_t gran_ = 0;
};

std::vector<uint32_t> word_pattern(size_t n) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint32_t>(i * 2654435761u);
  return v;
}

}  // namespace

TEST_F(VmmTest, GranularityIsAPowerOfTwo) {
  EXPECT_EQ(0u, gran_ & (gran_ - 1));
  const size_t rec = granularity(dev_prop_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  EXPECT_GE(rec, gran_);
  EXPECT_EQ(0u, rec % gran_);
  size_t g = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            cuMemGetAllocationGranularity(&g, nullptr, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
}

TEST_F(VmmTest, ReserveAndFree) {
  Reservation r(4 * gran_, gran_);
  ASSERT_CU(r.status());
  EXPECT_NE(0u, r.va());
  EXPECT_EQ(0u, r.va() % gran_);
  // A reservation is not memory: it costs no device capacity and is not
  // accessible until something is mapped.
  CUdeviceptr p = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressReserve(&p, 0, 0, 0, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressReserve(&p, gran_ + 1, 0, 0, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressReserve(&p, gran_, 3, 0, 0));
}

TEST_F(VmmTest, CreateDeviceHandleAndReadProperties) {
  Physical h(2 * gran_, dev_prop_);
  ASSERT_CU(h.status());
  CUmemAllocationProp got;
  std::memset(&got, 0, sizeof got);
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&got, h.get()));
  EXPECT_EQ(CU_MEM_ALLOCATION_TYPE_PINNED, got.type);
  EXPECT_EQ(CU_MEM_LOCATION_TYPE_DEVICE, got.location.type);
  EXPECT_EQ(device(), got.location.id);
  EXPECT_CU(h.release());
}

TEST_F(VmmTest, CreateWithUnalignedSizeIsInvalidValue) {
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, gran_ + 4096, &dev_prop_, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, gran_ / 2, &dev_prop_, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, 0, &dev_prop_, 0));
}

TEST_F(VmmTest, MapSetAccessUseUnmap) {
  const size_t size = 2 * gran_;
  Reservation r(size, gran_);
  ASSERT_CU(r.status());
  Physical h(size, dev_prop_);
  ASSERT_CU(h.status());
  ASSERT_CU(cuMemMap(r.va(), size, 0, h.get(), 0));

  CUmemLocation loc;
  std::memset(&loc, 0, sizeof loc);
  loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
  loc.id = device();
  unsigned long long flags = 99;
  ASSERT_CU(cuMemGetAccess(&flags, &loc, r.va()));
  EXPECT_EQ(static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_NONE), flags);

  CUmemAccessDesc acc = device_rw(device());
  ASSERT_CU(cuMemSetAccess(r.va(), size, &acc, 1));
  ASSERT_CU(cuMemGetAccess(&flags, &loc, r.va() + gran_ + 64));
  EXPECT_EQ(static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE), flags);

  const size_t words = size / 4;
  ASSERT_CU(contract::fill_u32(kernels(), nullptr, r.va(), 41u, words));
  ASSERT_CU(contract::add_one_u32(kernels(), nullptr, r.va(), words));
  ASSERT_CU(cuCtxSynchronize());
  expect_words(r.va(), std::vector<uint32_t>(words, 42u));

  ASSERT_CU(cuMemUnmap(r.va(), size));
  EXPECT_CU(h.release());
}

// A physical allocation is not a file descriptor: the driver hands out as
// many as device memory holds, whatever the process's fd limit (only
// cuMemExportToShareableHandle makes an fd). Here, with the limit just above
// what is open, more handles than that are created, mapped side by side,
// each filled with its own value and read back.
TEST_F(VmmTest, HandlesBeyondTheFileDescriptorLimit) {
  expect_child_returns_zero([this] {
    constexpr int kHandles = 256;
    std::error_code ec;
    rlimit lim{};
    int open_fds = 0;
    using Dir = std::filesystem::directory_iterator;
    for (auto it = Dir("/proc/self/fd", ec); !ec && it != Dir(); it.increment(ec)) ++open_fds;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1;
    lim.rlim_cur = static_cast<rlim_t>(open_fds + 16);
    if (lim.rlim_cur > lim.rlim_max || setrlimit(RLIMIT_NOFILE, &lim) != 0) return 2;
    CUdeviceptr va = 0;
    if (CUresult r = cuMemAddressReserve(&va, kHandles * gran_, gran_, 0, 0); r != CUDA_SUCCESS)
      return child_fail(3, "cuMemAddressReserve", r, CUDA_SUCCESS);
    std::vector<CUmemGenericAllocationHandle> handles(kHandles);
    const CUmemAccessDesc acc = device_rw(device());
    for (int i = 0; i < kHandles; ++i) {
      const CUdeviceptr at = va + static_cast<CUdeviceptr>(i) * gran_;
      if (CUresult r = cuMemCreate(&handles[i], gran_, &dev_prop_, 0); r != CUDA_SUCCESS)
        return child_fail(4, "cuMemCreate", r, CUDA_SUCCESS);
      if (CUresult r = cuMemMap(at, gran_, 0, handles[i], 0); r != CUDA_SUCCESS)
        return child_fail(5, "cuMemMap", r, CUDA_SUCCESS);
      if (CUresult r = cuMemSetAccess(at, gran_, &acc, 1); r != CUDA_SUCCESS)
        return child_fail(6, "cuMemSetAccess", r, CUDA_SUCCESS);
      if (CUresult r = contract::fill_u32(kernels(), nullptr, at, 1000u + i, gran_ / 4); r != CUDA_SUCCESS)
        return child_fail(7, "fill", r, CUDA_SUCCESS);
    }
    if (CUresult r = cuCtxSynchronize(); r != CUDA_SUCCESS) return child_fail(8, "cuCtxSynchronize", r, CUDA_SUCCESS);
    for (int i = 0; i < kHandles; ++i) {
      uint32_t first = 0, last = 0;
      const CUdeviceptr at = va + static_cast<CUdeviceptr>(i) * gran_;
      if (cuMemcpyDtoH(&first, at, 4) != CUDA_SUCCESS || cuMemcpyDtoH(&last, at + gran_ - 4, 4) != CUDA_SUCCESS)
        return 9;
      if (first != 1000u + i || last != 1000u + i) {
        std::fprintf(stderr, "handle %d holds %u .. %u, not %d\n", i, first, last, 1000 + i);
        return 10;
      }
    }
    for (int i = 0; i < kHandles; ++i)
      if (cuMemUnmap(va + static_cast<CUdeviceptr>(i) * gran_, gran_) != CUDA_SUCCESS ||
          cuMemRelease(handles[i]) != CUDA_SUCCESS)
        return 11;
    return cuMemAddressFree(va, kHandles * gran_) == CUDA_SUCCESS ? 0 : 12;
  });
}

// Physical memory keeps its bytes while unmapped: mapped again at the same
// VA (a tiering allocator's chunk going back where it was) and given access,
// it reads what was written before.
TEST_F(VmmTest, MemoryMappedAgainAtItsVaKeepsItsBytes) {
  const size_t size = 2 * gran_;
  Reservation r(size, gran_);
  ASSERT_CU(r.status());
  Physical h(size, dev_prop_);
  ASSERT_CU(h.status());
  CUmemAccessDesc acc = device_rw(device());
  const size_t words = size / 4;
  ASSERT_CU(cuMemMap(r.va(), size, 0, h.get(), 0));
  ASSERT_CU(cuMemSetAccess(r.va(), size, &acc, 1));
  ASSERT_CU(contract::fill_u32(kernels(), nullptr, r.va(), 7u, words));
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuMemUnmap(r.va(), size));
  ASSERT_CU(cuMemMap(r.va(), size, 0, h.get(), 0));
  ASSERT_CU(cuMemSetAccess(r.va(), size, &acc, 1));
  expect_words(r.va(), std::vector<uint32_t>(words, 7u));
  ASSERT_CU(cuMemUnmap(r.va(), size));
  EXPECT_CU(h.release());
}

// One handle mapped at two addresses at once: both reach the same memory,
// and unmapping one leaves the other. tierrt hands a freed block's chunk to
// a fetch this way (mapped at the fetched block's VA before the freed one's
// is unmapped). cuMemRelease and cuMemUnmap free the memory at its last
// mapping, so a handle may have several.
TEST_F(VmmTest, OneHandleMappedAtTwoAddressesIsTheSameMemory) {
  const size_t size = 2 * gran_;
  Reservation a(size, gran_), b(size, gran_);
  ASSERT_CU(a.status());
  ASSERT_CU(b.status());
  Physical h(size, dev_prop_);
  ASSERT_CU(h.status());
  ASSERT_CU(map_rw(a.va(), size, h));
  ASSERT_CU(map_rw(b.va(), size, h));
  const size_t words = size / 4;
  ASSERT_CU(contract::fill_u32(kernels(), nullptr, a.va(), 41u, words));
  ASSERT_CU(contract::add_one_u32(kernels(), nullptr, b.va(), words));
  ASSERT_CU(cuCtxSynchronize());
  expect_words(a.va(), std::vector<uint32_t>(words, 42u));
  ASSERT_CU(cuMemUnmap(a.va(), size));
  ASSERT_CU(h.release());
  ASSERT_CU(contract::add_one_u32(kernels(), nullptr, b.va(), words));
  ASSERT_CU(cuCtxSynchronize());
  expect_words(b.va(), std::vector<uint32_t>(words, 43u));
  ASSERT_CU(cuMemUnmap(b.va(), size));
}

TEST_F(VmmTest, HandleMayBeReleasedWhileMapped) {
  const size_t size = gran_;
  Reservation r(size, gran_);
  ASSERT_CU(r.status());
  Physical h(size, dev_prop_);
  ASSERT_CU(h.status());
  ASSERT_CU(map_rw(r.va(), size, h));
  ASSERT_CU(h.release());  // the mapping keeps the memory alive
  ASSERT_CU(cuMemsetD32(r.va(), 7u, size / 4));
  expect_words(r.va(), std::vector<uint32_t>(size / 4, 7u));
  ASSERT_CU(cuMemUnmap(r.va(), size));
}

// Read on NVIDIA's driver 580 (H200): NOT_SUPPORTED, where the reference
// would suggest INVALID_VALUE.
TEST_F(VmmTest, UnalignedMapArgumentsAreNotSupported) {
  const size_t size = 2 * gran_;
  Reservation r(size, gran_);
  ASSERT_CU(r.status());
  Physical h(size, dev_prop_);
  ASSERT_CU(h.status());
  EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, cuMemMap(r.va() + 4096, gran_, 0, h.get(), 0));
  EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, cuMemMap(r.va(), gran_, 4096, h.get(), 0));
  EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, cuMemMap(r.va(), gran_ + 4096, 0, h.get(), 0));
  // offset + size beyond the handle
  EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, cuMemMap(r.va(), size, gran_, h.get(), 0));
  // The range is still free after the failures.
  ASSERT_CU(cuMemMap(r.va(), size, 0, h.get(), 0));
  CUmemAccessDesc acc = device_rw(device());
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemSetAccess(r.va() + 4096, gran_, &acc, 1));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(r.va() + 4096, gran_));
  ASSERT_CU(cuMemUnmap(r.va(), size));
}

TEST_F(VmmTest, UnmapOfASubRangeIsInvalidValue) {
  Reservation r(2 * gran_, gran_);
  ASSERT_CU(r.status());
  Physical h(2 * gran_, dev_prop_);
  ASSERT_CU(h.status());
  ASSERT_CU(map_rw(r.va(), 2 * gran_, h));
  // One mapping is unmapped whole, not in parts.
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(r.va() + gran_, gran_));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(r.va(), gran_));
  ASSERT_CU(cuMemsetD32(r.va(), 3u, 2 * gran_ / 4));  // still fully mapped
  ASSERT_CU(cuCtxSynchronize());                      // cuMemUnmap does not wait for work
  ASSERT_CU(cuMemUnmap(r.va(), 2 * gran_));
}

TEST_F(VmmTest, SetAccessOnAPartlyMappedRangeIsInvalidValue) {
  Reservation r(2 * gran_, gran_);
  ASSERT_CU(r.status());
  Physical h(gran_, dev_prop_);
  ASSERT_CU(h.status());
  ASSERT_CU(cuMemMap(r.va(), gran_, 0, h.get(), 0));
  CUmemAccessDesc acc = device_rw(device());
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemSetAccess(r.va(), 2 * gran_, &acc, 1));
  EXPECT_CU(cuMemSetAccess(r.va(), gran_, &acc, 1));
  ASSERT_CU(cuMemUnmap(r.va(), gran_));
}

TEST_F(VmmTest, MappingAnAlreadyMappedRangeFails) {
  Reservation r(gran_, gran_);
  ASSERT_CU(r.status());
  Physical a(gran_, dev_prop_), b(gran_, dev_prop_);
  ASSERT_CU(a.status());
  ASSERT_CU(b.status());
  ASSERT_CU(cuMemMap(r.va(), gran_, 0, a.get(), 0));
  EXPECT_NE(CUDA_SUCCESS, cuMemMap(r.va(), gran_, 0, b.get(), 0));
  ASSERT_CU(cuMemUnmap(r.va(), gran_));
}

// The reference describes an offset into the handle; NVIDIA's driver 580
// (H200) refuses any offset other than 0, aligned or not. tierrt maps whole
// handles only.
TEST_F(VmmTest, MapWithAnOffsetIntoTheHandleIsNotSupported) {
  Reservation r(2 * gran_, gran_);
  ASSERT_CU(r.status());
  Physical h(2 * gran_, dev_prop_);
  ASSERT_CU(h.status());
  EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, cuMemMap(r.va(), gran_, gran_, h.get(), 0));
  // The range is still free: the whole handle maps there.
  ASSERT_CU(cuMemMap(r.va(), 2 * gran_, 0, h.get(), 0));
  ASSERT_CU(cuMemUnmap(r.va(), 2 * gran_));
}

TEST_F(VmmTest, RetainAllocationHandleFromInteriorAddress) {
  Reservation r(2 * gran_, gran_);
  ASSERT_CU(r.status());
  Physical h(2 * gran_, dev_prop_);
  ASSERT_CU(h.status());
  ASSERT_CU(map_rw(r.va(), 2 * gran_, h));
  CUmemGenericAllocationHandle got = 0;
  ASSERT_CU(cuMemRetainAllocationHandle(&got, reinterpret_cast<void*>(r.va() + gran_ + 100)));
  EXPECT_EQ(h.get(), got);
  ASSERT_CU(cuMemRelease(got));  // the retain took a reference
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&prop, h.get()));
  EXPECT_EQ(CU_MEM_LOCATION_TYPE_DEVICE, prop.location.type);
  ASSERT_CU(cuMemUnmap(r.va(), 2 * gran_));
}

TEST_F(VmmTest, HostHandleIsUsableByKernelsAndCopies) {
  if (!host_vmm()) GTEST_SKIP() << "HOST VMM allocations not supported";
  CUmemAllocationProp hp = prop_for(CU_MEM_LOCATION_TYPE_HOST, 0);
  const size_t g = std::max(gran_, granularity(hp));
  Reservation r(g, g);
  ASSERT_CU(r.status());
  Physical h(g, hp);
  ASSERT_CU(h.status());
  CUmemAllocationProp got;
  std::memset(&got, 0, sizeof got);
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&got, h.get()));
  // Read on NVIDIA's driver 580 (H200): a HOST handle reports its NUMA node.
  EXPECT_EQ(CU_MEM_LOCATION_TYPE_HOST_NUMA, got.location.type);
  ASSERT_CU(map_rw(r.va(), g, h));
  const auto words = word_pattern(g / 4);
  ASSERT_CU(cuMemcpyHtoD(r.va(), words.data(), g));
  ASSERT_CU(contract::add_one_u32(kernels(), nullptr, r.va(), g / 4));
  ASSERT_CU(cuCtxSynchronize());
  std::vector<uint32_t> want(words);
  for (auto& w : want) ++w;
  expect_words(r.va(), want);
  ASSERT_CU(cuMemUnmap(r.va(), g));
}

TEST_F(VmmTest, HostHandleWithShareableHandleTypeIsInvalidValue) {
  if (!host_vmm()) GTEST_SKIP() << "HOST VMM allocations not supported";
  CUmemAllocationProp hp = prop_for(CU_MEM_LOCATION_TYPE_HOST, 0);
  const size_t g = std::max(gran_, granularity(hp));
  hp.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, g, &hp, 0));
}

TEST_F(VmmTest, HostNumaHandleOnTheDevicesNode) {
  if (!host_numa_vmm()) GTEST_SKIP() << "HOST_NUMA VMM allocations not supported";
  CUmemAllocationProp np = prop_for(CU_MEM_LOCATION_TYPE_HOST_NUMA, numa_node());
  const size_t g = std::max(gran_, granularity(np));
  Physical h(g, np);
  ASSERT_CU(h.status());
  CUmemAllocationProp got;
  std::memset(&got, 0, sizeof got);
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&got, h.get()));
  EXPECT_EQ(CU_MEM_LOCATION_TYPE_HOST_NUMA, got.location.type);
  EXPECT_EQ(numa_node(), got.location.id);
  Reservation r(g, g);
  ASSERT_CU(r.status());
  ASSERT_CU(map_rw(r.va(), g, h));
  ASSERT_CU(cuMemsetD32(r.va(), 0x600du, g / 4));
  ASSERT_CU(contract::add_one_u32(kernels(), nullptr, r.va(), g / 4));
  ASSERT_CU(cuCtxSynchronize());
  expect_words(r.va(), std::vector<uint32_t>(g / 4, 0x600eu));
  ASSERT_CU(cuMemUnmap(r.va(), g));
}

TEST_F(VmmTest, HostNumaWithoutAValidNodeIsRejected) {
  if (!host_numa_vmm()) GTEST_SKIP() << "HOST_NUMA VMM allocations not supported";
  CUmemAllocationProp np = prop_for(CU_MEM_LOCATION_TYPE_HOST_NUMA, -1);
  const size_t g = std::max(gran_, granularity(prop_for(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0)));
  CUmemGenericAllocationHandle h = 0;
  const CUresult r = cuMemCreate(&h, g, &np, 0);
  EXPECT_TRUE(r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_INVALID_DEVICE)
      << ::testing::PrintToString(r);
  // HOST_NUMA_CURRENT is documented as invalid for cuMemCreate.
  CUmemAllocationProp cur = prop_for(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, g, &cur, 0));
}

TEST_F(VmmTest, DeviceHandleUsesDeviceMemoryAndHostHandleDoesNot) {
  size_t f0 = 0, f1 = 0, total = 0;
  const size_t size = 64 * gran_;
  ASSERT_CU(cuMemGetInfo(&f0, &total));
  {
    Physical dev(size, dev_prop_);
    ASSERT_CU(dev.status());
    ASSERT_CU(cuMemGetInfo(&f1, &total));
    EXPECT_GE(f0 - f1, size);
  }
  ASSERT_CU(cuMemGetInfo(&f1, &total));
  EXPECT_GE(f1 + gran_, f0);  // released
  if (!host_vmm()) GTEST_SKIP() << "HOST VMM allocations not supported";
  CUmemAllocationProp hp = prop_for(CU_MEM_LOCATION_TYPE_HOST, 0);
  const size_t hsize = (size / granularity(hp) + 1) * granularity(hp);
  Physical host(hsize, hp);
  ASSERT_CU(host.status());
  ASSERT_CU(cuMemGetInfo(&f1, &total));
  // Host memory is not device memory: at most bookkeeping moves.
  EXPECT_LT(f0 > f1 ? f0 - f1 : 0, hsize / 4);
}

// The remap at the heart of tierrt's spill: the VA the application holds
// moves from device memory to host memory and keeps its bytes.
TEST_F(VmmTest, RemapFromDeviceToHostKeepsBytesAndStaysUsable) {
  if (!host_vmm()) GTEST_SKIP() << "HOST VMM allocations not supported";
  CUmemAllocationProp hp = prop_for(CU_MEM_LOCATION_TYPE_HOST, 0);
  const size_t g = std::max(gran_, granularity(hp));
  const size_t size = 2 * g, words = size / 4;
  Reservation r(size, g);
  ASSERT_CU(r.status());
  const CUdeviceptr va = r.va();

  // Resident: device memory, written by a copy and a kernel.
  Physical dev(size, dev_prop_);
  ASSERT_CU(dev.status());
  ASSERT_CU(map_rw(va, size, dev));
  auto want = word_pattern(words);
  ASSERT_CU(cuMemcpyHtoD(va, want.data(), size));
  ASSERT_CU(contract::add_one_u32(kernels(), nullptr, va, words));
  for (auto& w : want) ++w;

  // Spill: copy out through a pinned staging buffer, unmap, drop the device memory.
  Stream s;
  ASSERT_CU(s.status());
  PinnedBuffer staging(size);
  ASSERT_CU(staging.status());
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuMemcpyDtoHAsync(staging.get(), va, size, s));
  ASSERT_CU(cuStreamSynchronize(s));
  ASSERT_CU(cuMemUnmap(va, size));
  ASSERT_CU(dev.release());

  // Host memory at the same VA, access set again, bytes copied in.
  Physical host(size, hp);
  ASSERT_CU(host.status());
  ASSERT_CU(map_rw(va, size, host));
  ASSERT_CU(cuMemcpyHtoDAsync(va, staging.get(), size, s));
  ASSERT_CU(cuStreamSynchronize(s));
  expect_words(va, want);

  CUmemGenericAllocationHandle backing = 0;
  ASSERT_CU(cuMemRetainAllocationHandle(&backing, reinterpret_cast<void*>(va)));
  EXPECT_EQ(host.get(), backing);
  ASSERT_CU(cuMemRelease(backing));

  // Still usable: kernels, memsets and copies through the same VA.
  ASSERT_CU(contract::add_one_u32(kernels(), s, va, words));
  ASSERT_CU(cuMemsetD32Async(va, 0xfeedu, 16, s));
  ASSERT_CU(cuStreamSynchronize(s));
  for (size_t i = 0; i < words; ++i) want[i] = i < 16 ? 0xfeedu : want[i] + 1;
  expect_words(va, want);
  DeviceBuffer other(size);
  ASSERT_CU(other.status());
  ASSERT_CU(cuMemcpyDtoD(other.ptr(), va, size));
  ASSERT_CU(contract::add_one_u32(kernels(), nullptr, other.ptr(), words));
  ASSERT_CU(cuCtxSynchronize());
  for (auto& w : want) ++w;
  expect_words(other.ptr(), want);
  ASSERT_CU(cuMemUnmap(va, size));
}

// --- work naming an unmapped VA: sticky CUDA_ERROR_ILLEGAL_ADDRESS ----------
// These run in a fresh process because the error poisons the context.

namespace {

// The error of enqueue-then-synchronise: either call may report it.
CUresult work_result(CUresult enqueue) {
  if (enqueue != CUDA_SUCCESS) return enqueue;
  return cuCtxSynchronize();
}

// In a child: `gran` bytes reserved at *va, made at *h, mapped with access,
// used by a kernel, then unmapped. 0, or child_fail's code for the step that failed.
int used_then_unmapped(const contract::Kernels& k, const CUmemAllocationProp& prop, CUdevice dev, size_t gran,
                       CUdeviceptr* va, CUmemGenericAllocationHandle* h) {
  if (CUresult r = cuMemAddressReserve(va, gran, gran, 0, 0); r != CUDA_SUCCESS)
    return child_fail(1, "cuMemAddressReserve", r, CUDA_SUCCESS);
  if (CUresult r = cuMemCreate(h, gran, &prop, 0); r != CUDA_SUCCESS)
    return child_fail(2, "cuMemCreate", r, CUDA_SUCCESS);
  if (CUresult r = cuMemMap(*va, gran, 0, *h, 0); r != CUDA_SUCCESS) return child_fail(3, "cuMemMap", r, CUDA_SUCCESS);
  CUmemAccessDesc acc = device_rw(dev);
  if (CUresult r = cuMemSetAccess(*va, gran, &acc, 1); r != CUDA_SUCCESS)
    return child_fail(4, "cuMemSetAccess", r, CUDA_SUCCESS);
  if (CUresult r = work_result(contract::fill_u32(k, nullptr, *va, 1u, 64)); r != CUDA_SUCCESS)
    return child_fail(5, "kernel while mapped", r, CUDA_SUCCESS);
  if (CUresult r = cuMemUnmap(*va, gran); r != CUDA_SUCCESS) return child_fail(6, "cuMemUnmap", r, CUDA_SUCCESS);
  return 0;
}

int expect_illegal_and_sticky(CUresult got, const char* what) {
  if (got != CUDA_ERROR_ILLEGAL_ADDRESS)
    return child_fail(10, what, got, CUDA_ERROR_ILLEGAL_ADDRESS);
  // Sticky: the context stays unusable.
  const CUresult again = cuCtxSynchronize();
  if (again != CUDA_ERROR_ILLEGAL_ADDRESS)
    return child_fail(11, "cuCtxSynchronize after the fault", again, CUDA_ERROR_ILLEGAL_ADDRESS);
  return 0;
}

}  // namespace

TEST_F(VmmTest, KernelOnReservedButUnmappedVaIsIllegalAddress) {
  expect_child_returns_zero([this] {
    CUdeviceptr va = 0;
    if (CUresult r = cuMemAddressReserve(&va, 2 * gran_, gran_, 0, 0); r != CUDA_SUCCESS)
      return child_fail(1, "cuMemAddressReserve", r, CUDA_SUCCESS);
    const CUresult r = work_result(contract::fill_u32(kernels(), nullptr, va + 256, 1u, 64));
    return expect_illegal_and_sticky(r, "kernel on an unmapped VA");
  });
}

TEST_F(VmmTest, KernelOnUnmappedAfterUseVaIsIllegalAddress) {
  expect_child_returns_zero([this] {
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h = 0;
    if (int failed = used_then_unmapped(kernels(), dev_prop_, device(), gran_, &va, &h)) return failed;
    if (CUresult r = cuMemRelease(h); r != CUDA_SUCCESS)
      return child_fail(7, "cuMemRelease", r, CUDA_SUCCESS);
    const CUresult r = work_result(contract::add_one_u32(kernels(), nullptr, va, 64));
    return expect_illegal_and_sticky(r, "kernel on a VA after unmap and release");
  });
}

TEST_F(VmmTest, KernelOnMappedVaWithoutAccessIsIllegalAddress) {
  expect_child_returns_zero([this] {
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h = 0;
    if (CUresult r = cuMemAddressReserve(&va, gran_, gran_, 0, 0); r != CUDA_SUCCESS)
      return child_fail(1, "cuMemAddressReserve", r, CUDA_SUCCESS);
    if (CUresult r = cuMemCreate(&h, gran_, &dev_prop_, 0); r != CUDA_SUCCESS)
      return child_fail(2, "cuMemCreate", r, CUDA_SUCCESS);
    if (CUresult r = cuMemMap(va, gran_, 0, h, 0); r != CUDA_SUCCESS)
      return child_fail(3, "cuMemMap", r, CUDA_SUCCESS);
    // Mapped, but no cuMemSetAccess: the device may not touch it.
    const CUresult r = work_result(contract::fill_u32(kernels(), nullptr, va, 1u, 64));
    return expect_illegal_and_sticky(r, "kernel on a mapped VA without access");
  });
}

// The same memory mapped again where it was used, before cuMemSetAccess:
// no access, as for a fresh mapping (the earlier mapping's access is gone).
TEST_F(VmmTest, KernelOnMemoryMappedAgainWithoutAccessIsIllegalAddress) {
  expect_child_returns_zero([this] {
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h = 0;
    if (int failed = used_then_unmapped(kernels(), dev_prop_, device(), gran_, &va, &h)) return failed;
    if (CUresult r = cuMemMap(va, gran_, 0, h, 0); r != CUDA_SUCCESS)
      return child_fail(7, "cuMemMap again", r, CUDA_SUCCESS);
    const CUresult r = work_result(contract::add_one_u32(kernels(), nullptr, va, 64));
    return expect_illegal_and_sticky(r, "kernel on memory mapped again without access");
  });
}

TEST_F(VmmTest, KernelOnFreedAllocationIsIllegalAddress) {
  expect_child_returns_zero([this] {
    // Large enough to have its own pages, so that cuMemFree unmaps them.
    const size_t bytes = 64 << 20;
    CUdeviceptr p = 0;
    if (CUresult r = cuMemAlloc(&p, bytes); r != CUDA_SUCCESS)
      return child_fail(1, "cuMemAlloc", r, CUDA_SUCCESS);
    if (CUresult r = cuMemFree(p); r != CUDA_SUCCESS)
      return child_fail(2, "cuMemFree", r, CUDA_SUCCESS);
    const CUresult r = work_result(contract::fill_u32(kernels(), nullptr, p, 1u, 1024));
    return expect_illegal_and_sticky(r, "kernel on a freed allocation");
  });
}

// Copies and memsets naming device memory that is not mapped are refused at
// the call with INVALID_VALUE, async ones too, and nothing runs: the context
// stays usable (read on NVIDIA's driver 580, H200). Kernels, whose accesses
// the driver cannot know in advance, fault instead (above).
TEST_F(VmmTest, CopyFromUnmappedVaIsRefusedAtTheCall) {
  Reservation r(gran_, gran_);
  ASSERT_CU(r.status());
  DeviceBuffer dst(4096);
  ASSERT_CU(dst.status());
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoDAsync(dst.ptr(), r.va(), 4096, nullptr));
  EXPECT_CU(cuCtxSynchronize());
}

TEST_F(VmmTest, CopyIntoUnmappedVaIsRefusedAtTheCall) {
  Reservation r(gran_, gran_);
  ASSERT_CU(r.status());
  contract::Stream s;
  ASSERT_CU(s.status());
  PinnedBuffer src(4096);
  ASSERT_CU(src.status());
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoDAsync(r.va() + 4096, src.get(), 4096, s.get()));
  EXPECT_CU(cuCtxSynchronize());
}

TEST_F(VmmTest, CopySpanningIntoAnUnmappedPartIsRefusedAtTheCall) {
  // The first granule is mapped, the second is not; the copy straddles both.
  Reservation r(2 * gran_, gran_);
  ASSERT_CU(r.status());
  Physical h(gran_, dev_prop_);
  ASSERT_CU(h.status());
  ASSERT_CU(map_rw(r.va(), gran_, h));
  std::vector<unsigned char> host(8192, 1);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD(r.va() + gran_ - 4096, host.data(), host.size()));
  EXPECT_CU(cuCtxSynchronize());
  ASSERT_CU(cuMemUnmap(r.va(), gran_));
}

TEST_F(VmmTest, MemsetOnUnmappedVaIsRefusedAtTheCall) {
  Reservation r(gran_, gran_);
  ASSERT_CU(r.status());
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemsetD32Async(r.va(), 0u, 1024, nullptr));
  EXPECT_CU(cuCtxSynchronize());
}

// A driver that does not advertise host VMM takes no HOST / HOST_NUMA
// physical allocation; one that does takes them at its reported granularity.
TEST_F(VmmTest, HostLocationsAreAcceptedExactlyWhereAdvertised) {
  const struct {
    CUmemLocationType type;
    bool advertised;
  } locations[] = {{CU_MEM_LOCATION_TYPE_HOST, host_vmm()},
                   {CU_MEM_LOCATION_TYPE_HOST_NUMA, host_numa_vmm()}};
  for (const auto& l : locations) {
    CUmemAllocationProp p = prop_for(l.type, l.type == CU_MEM_LOCATION_TYPE_HOST ? 0 : numa_node());
    size_t g = 0;
    CUresult gr = cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (!l.advertised) {
      CUmemGenericAllocationHandle h = 0;
      EXPECT_NE(CUDA_SUCCESS, cuMemCreate(&h, gran_, &p, 0)) << "location type " << l.type;
      continue;
    }
    ASSERT_CU(gr);
    ASSERT_GT(g, 0u);
    Physical h(g, p);
    EXPECT_CU(h.status());
    if (g > 4096) {
      // Not a multiple of the location's own granularity.
      Physical odd(g + g / 2, p);
      EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, odd.status());
    }
  }
}
