// SIMDEV_HOST_VMM=0 makes simdev a driver without host VMM: HOST and
// HOST_NUMA physical allocations are refused and the attributes that
// advertise them say 0. SIMDEV_HOST_VMM_GRANULARITY gives host locations a
// granularity of their own.
#include <cstring>

#include "simdev_test.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

CUmemAllocationProp prop_for(CUmemLocationType type) {
  CUmemAllocationProp p;
  std::memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = type;
  p.location.id = 0;
  return p;
}

CUresult create_and_release(size_t bytes, const CUmemAllocationProp& p) {
  CUmemGenericAllocationHandle h = 0;
  CUresult r = cuMemCreate(&h, bytes, &p, 0);
  if (r == CUDA_SUCCESS) cuMemRelease(h);
  return r;
}

}  // namespace

using SimdevHostVmm = SimdevTest;

TEST_F(SimdevHostVmm, Env_HostVmmOffRefusesHostLocations) {
  if (env_or_empty("SIMDEV_HOST_VMM") != "0") GTEST_SKIP() << "needs SIMDEV_HOST_VMM=0";
  EXPECT_EQ(0, attribute(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED));
  EXPECT_EQ(0, attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED));
  for (CUmemLocationType t : {CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA}) {
    CUmemAllocationProp p = prop_for(t);
    size_t g = 0;
    EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, create_and_release(2 * kMiB, p));
  }
  EXPECT_CU(create_and_release(2 * kMiB, prop_for(CU_MEM_LOCATION_TYPE_DEVICE)));
}

TEST_F(SimdevHostVmm, Env_HostVmmGranularityIsItsOwn) {
  const std::string want = env_or_empty("SIMDEV_TEST_EXPECT_HOST_GRANULARITY");
  if (want.empty()) GTEST_SKIP() << "needs SIMDEV_HOST_VMM_GRANULARITY";
  const size_t host_g = std::stoull(want);
  for (CUmemLocationType t : {CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA}) {
    CUmemAllocationProp p = prop_for(t);
    size_t g = 0;
    ASSERT_CU(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT_EQ(host_g, g);
    EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, create_and_release(host_g / 2, p));
    EXPECT_CU(create_and_release(host_g, p));
  }
  CUmemAllocationProp dev = prop_for(CU_MEM_LOCATION_TYPE_DEVICE);
  size_t g = 0;
  ASSERT_CU(cuMemGetAllocationGranularity(&g, &dev, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT_EQ(2 * kMiB, g);
  // A host handle maps only at multiples of its own granularity.
  CUmemAllocationProp hp = prop_for(CU_MEM_LOCATION_TYPE_HOST);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_CU(cuMemCreate(&h, host_g, &hp, 0));
  CUdeviceptr va = 0;
  ASSERT_CU(cuMemAddressReserve(&va, 2 * host_g, host_g, 0, 0));
  EXPECT_EQ(CUDA_ERROR_NOT_SUPPORTED, cuMemMap(va + 2 * kMiB, host_g, 0, h, 0));
  EXPECT_CU(cuMemMap(va, host_g, 0, h, 0));
  EXPECT_CU(cuMemUnmap(va, host_g));
  EXPECT_CU(cuMemAddressFree(va, 2 * host_g));
  EXPECT_CU(cuMemRelease(h));
}
