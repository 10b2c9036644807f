// Initialisation, versions and the simulated devices (SIMDEV_DEVICES).
#include <pthread.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "proc_table.h"
#include "state.h"

using namespace simdev;

namespace {

constexpr const char* kDeviceName = "simdev (simulated H200-class device)";

CUresult initialize() {
  State& s = state();
  if (!s.config_error.empty()) {
    std::fprintf(stderr, "%s\n", s.config_error.c_str());
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Each physical allocation is a memfd: give the process room for many.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (CUresult e = s.memory.init(s.config.va_bytes, s.config.device_bytes, s.config.host_bytes)) return e;
  // CUDA does not survive fork: a child forked after initialisation finds
  // no driver threads and no contexts, and every call it makes fails, cuInit
  // included (see README: fork).
  pthread_atfork(nullptr, nullptr, [] {
    state().forked_child.store(true, std::memory_order_relaxed);
    state().initialized.store(false, std::memory_order_release);
  });
  s.initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult check_device(CUdevice dev) { return valid_device(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }

}  // namespace

SIMDEV_API CUresult CUDAAPI cuInit(unsigned int flags) {
  SIMDEV_FAULT_POINT("cuInit", CUDA_ERROR_NO_DEVICE);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (state().forked_child.load(std::memory_order_relaxed)) return CUDA_ERROR_NOT_INITIALIZED;
  static std::once_flag once;
  static CUresult result = CUDA_SUCCESS;
  std::call_once(once, [] { result = initialize(); });
  return result;
}

SIMDEV_API CUresult CUDAAPI cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = driver_version();  // the toolkit's CUDA_VERSION, or SIMDEV_DRIVER_VERSION
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDeviceGetCount(int* count) {
  SIMDEV_ENTER("cuDeviceGetCount", CUDA_ERROR_NO_DEVICE);
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = device_count();
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  SIMDEV_ENTER("cuDeviceGet", CUDA_ERROR_INVALID_DEVICE);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_device(ordinal)) return e;
  *device = ordinal;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  SIMDEV_ENTER("cuDeviceGetName", CUDA_ERROR_INVALID_DEVICE);
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_device(dev)) return e;
  std::snprintf(name, static_cast<size_t>(len), "%s", kDeviceName);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  SIMDEV_ENTER("cuDeviceGetUuid_v2", CUDA_ERROR_INVALID_DEVICE);
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_device(dev)) return e;
  std::memcpy(uuid->bytes, "simdev-device-00", sizeof uuid->bytes);
  uuid->bytes[15] = static_cast<char>('0' + dev);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

SIMDEV_API CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  SIMDEV_ENTER("cuDeviceTotalMem_v2", CUDA_ERROR_INVALID_DEVICE);
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_device(dev)) return e;
  *bytes = state().memory.device_capacity();
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attr, CUdevice dev) {
  SIMDEV_ENTER("cuDeviceGetAttribute", CUDA_ERROR_INVALID_VALUE);
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_device(dev)) return e;
  return device_attribute(attr, value, dev);
}

SIMDEV_API CUresult CUDAAPI cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  SIMDEV_ENTER("cuDeviceComputeCapability", CUDA_ERROR_INVALID_DEVICE);
  if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_device(dev)) return e;
  device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, major, dev);
  device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, minor, dev);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDeviceGetPCIBusId(char* bus_id, int len, CUdevice dev) {
  SIMDEV_ENTER("cuDeviceGetPCIBusId", CUDA_ERROR_INVALID_DEVICE);
  if (!bus_id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult e = check_device(dev)) return e;
  int domain = 0, bus = 0;
  device_attribute(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, &domain, dev);
  device_attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, &bus, dev);
  std::snprintf(bus_id, static_cast<size_t>(len), "%08x:%02x:00.0", domain, bus);  // domain:bus:device.function
  return CUDA_SUCCESS;
}
