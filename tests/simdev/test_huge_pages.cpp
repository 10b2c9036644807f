// simdev asks Linux for 2 MiB pages for the memory it maps (huge_pages.h):
// a GPU maps device memory with 2 MiB pages, and under shadow paging a
// first access per 4 KiB page would be charged to the modeled copy or
// kernel. Checked in /proc/self/smaps, where the kernel gives shared memory
// huge pages (shmem_enabled not "never"); skipped where it does not.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "simdev_test.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

bool shmem_gives_huge_pages() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string line;
  if (!std::getline(f, line)) return false;
  return line.find("[never]") == std::string::npos && line.find("[deny]") == std::string::npos;
}

// ShmemPmdMapped of the smaps entry holding `va`, in KiB; -1 if none.
long pmd_mapped_kib(CUdeviceptr va) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    int used = 0;
    // A mapping's first line: "lo-hi perms ..."; its fields follow.
    if (std::sscanf(line.c_str(), "%lx-%lx %n", &lo, &hi, &used) == 2 && used > 0) {
      inside = lo <= va && va < hi;
      continue;
    }
    if (inside && line.rfind("ShmemPmdMapped:", 0) == 0) return std::stol(line.substr(15));
  }
  return -1;
}

}  // namespace

using SimdevHugePages = SimdevTest;

TEST_F(SimdevHugePages, MemoryMappedWithCuMemMapHas2MiBPages) {
  if (!shmem_gives_huge_pages()) GTEST_SKIP() << "shmem_enabled is never: Linux gives shared memory no huge page";
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device();
  const size_t bytes = 4 * kMiB;
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  ASSERT_CU(cuMemCreate(&h, bytes, &p, 0));
  ASSERT_CU(cuMemAddressReserve(&va, bytes, 2 * kMiB, 0, 0));
  ASSERT_CU(cuMemMap(va, bytes, 0, h, 0));
  CUmemAccessDesc access{};
  access.location = p.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  ASSERT_CU(cuMemSetAccess(va, bytes, &access, 1));
  ASSERT_CU(cuMemsetD8(va, 0x5a, bytes));  // asynchronous for device memory
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(4096, pmd_mapped_kib(va));
  ASSERT_CU(cuMemUnmap(va, bytes));
  ASSERT_CU(cuMemAddressFree(va, bytes));
  ASSERT_CU(cuMemRelease(h));
}

TEST_F(SimdevHugePages, ALargeCuMemAllocHas2MiBPages) {
  if (!shmem_gives_huge_pages()) GTEST_SKIP() << "shmem_enabled is never: Linux gives shared memory no huge page";
  CUdeviceptr va = 0;
  ASSERT_CU(cuMemAlloc(&va, 4 * kMiB));
  EXPECT_EQ(va % (2 * kMiB), 0u);
  ASSERT_CU(cuMemsetD8(va, 0x5a, 4 * kMiB));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(4096, pmd_mapped_kib(va));
  ASSERT_CU(cuMemFree(va));
}
