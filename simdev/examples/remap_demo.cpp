// The remap that tierrt's tiering stands on, shown with the driver API alone:
// a device address keeps its bytes while what backs it moves from device
// memory to host memory, and touching it while nothing is mapped is an
// error, not a crash. Includes only <cuda.h>; runs on simdev or a GPU.
#include <cuda.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

const char* name_of(CUresult r) {
  const char* n = nullptr;
  cuGetErrorName(r, &n);
  return n ? n : "unknown CUresult";
}

#define CHECK(call)                                                                \
  do {                                                                             \
    CUresult r_ = (call);                                                          \
    if (r_ != CUDA_SUCCESS) {                                                      \
      std::fprintf(stderr, "remap-demo: %s failed: %s\n", #call, name_of(r_));     \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

uint64_t fnv1a(const std::vector<unsigned char>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

size_t device_used() {
  size_t free_b = 0, total = 0;
  CHECK(cuMemGetInfo(&free_b, &total));
  return total - free_b;
}

CUmemAllocationProp prop_at(CUmemLocationType type, int id) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = type;
  p.location.id = id;
  return p;
}

void map_with_access(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle h, CUdevice dev) {
  CHECK(cuMemMap(va, size, 0, h, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemSetAccess(va, size, &access, 1));
}

}  // namespace

int main() {
  constexpr double kMiB = 1024.0 * 1024.0;
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  char name[128];
  CHECK(cuDeviceGetName(name, sizeof name, dev));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  std::printf("device: %s\n", name);

  int host_vmm = 0, numa_id = -1;
  CHECK(cuDeviceGetAttribute(&host_vmm, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  CHECK(cuDeviceGetAttribute(&numa_id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev));
  if (!host_vmm) {
    std::printf("this device cannot map host memory with cuMemCreate; nothing to show\n");
    return 0;
  }

  CUmemAllocationProp device_prop = prop_at(CU_MEM_LOCATION_TYPE_DEVICE, dev);
  CUmemAllocationProp host_prop = numa_id >= 0 ? prop_at(CU_MEM_LOCATION_TYPE_HOST_NUMA, numa_id)
                                               : prop_at(CU_MEM_LOCATION_TYPE_HOST, 0);
  size_t gran = 0;
  CHECK(cuMemGetAllocationGranularity(&gran, &device_prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  const size_t size = ((64u << 20) + gran - 1) / gran * gran;

  CUdeviceptr va = 0, scratch = 0;
  CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
  CHECK(cuMemAddressReserve(&scratch, size, 0, 0, 0));
  std::printf("reserved %.0f MiB of device address space at 0x%" PRIx64 "\n", size / kMiB, uint64_t(va));

  size_t used_before = device_used();
  CUmemGenericAllocationHandle on_device;
  CHECK(cuMemCreate(&on_device, size, &device_prop, 0));
  map_with_access(va, size, on_device, dev);
  std::printf("backed it with device memory: device memory in use %.0f -> %.0f MiB\n", used_before / kMiB,
              device_used() / kMiB);

  std::vector<unsigned char> pattern(size);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : pattern) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  CHECK(cuMemcpyHtoD(va, pattern.data(), size));
  const uint64_t before = fnv1a(pattern);
  std::printf("filled it: checksum %016" PRIx64 "\n", before);

  // Spill: copy into host physical memory mapped at a scratch address, then
  // put that host memory under the original address.
  CUmemGenericAllocationHandle on_host;
  CHECK(cuMemCreate(&on_host, size, &host_prop, 0));
  map_with_access(scratch, size, on_host, dev);
  CHECK(cuMemcpyDtoD(scratch, va, size));
  CHECK(cuCtxSynchronize());
  CHECK(cuMemUnmap(scratch, size));
  CHECK(cuMemUnmap(va, size));
  CHECK(cuMemRelease(on_device));
  map_with_access(va, size, on_host, dev);
  std::printf("remapped 0x%" PRIx64 " onto %s memory: device memory in use now %.0f MiB\n", uint64_t(va),
              numa_id >= 0 ? "host NUMA" : "host", device_used() / kMiB);

  std::vector<unsigned char> back(size);
  CHECK(cuMemcpyDtoH(back.data(), va, size));
  const uint64_t after = fnv1a(back);
  bool same = std::memcmp(back.data(), pattern.data(), size) == 0;
  std::printf("read it back through the same address: checksum %016" PRIx64 " (%s)\n", after,
              same ? "bit-identical" : "DIFFERENT");

  // Nothing mapped: the driver must refuse, not crash.
  CHECK(cuMemUnmap(va, size));
  CHECK(cuMemRelease(on_host));
  CUresult touched = cuMemcpyDtoH(back.data(), va, 4096);
  if (touched == CUDA_SUCCESS) touched = cuCtxSynchronize();
  std::printf("copy from it with nothing mapped: %s\n", name_of(touched));
  bool ok = same && touched != CUDA_SUCCESS;
  std::printf("%s\n", ok ? "OK: the address kept its bytes across the move" : "FAILED");
  return ok ? 0 : 1;
}
