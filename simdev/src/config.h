// simdev's knobs, read once from the environment when the library loads.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace simdev {

// The most devices SIMDEV_DEVICES may ask for.
inline constexpr int kMaxDevices = 8;

// How an attribute override answers: a value, or an error (as some drivers
// answer CUDA_ERROR_INVALID_VALUE for attributes newer than themselves).
struct AttributeOverride {
  int value = 0;
  int error = 0;  // a CUresult; 0 means "answer value"
};

struct Config {
  uint64_t device_bytes = uint64_t{4} << 30;  // SIMDEV_MEM
  uint64_t host_bytes = 0;                    // SIMDEV_HOST_MEM (0: physical RAM)
  uint64_t va_bytes = uint64_t{256} << 30;    // SIMDEV_VA: device VA space
  uint64_t resident_bytes = 0;                // SIMDEV_RESIDENT: pre-faulted, recycled physical memory
  double h2d_bytes_per_ns = 0;                // SIMDEV_H2D_GBPS (0: unthrottled)
  double d2h_bytes_per_ns = 0;                // SIMDEV_D2H_GBPS
  int host_numa_id = 0;                       // SIMDEV_HOST_NUMA_ID, device 0's
  std::vector<int> host_numa_ids{0};          // SIMDEV_HOST_NUMA_ID, one per device
  int devices = 1;                            // SIMDEV_DEVICES
  bool peer_access = true;                    // SIMDEV_PEER_ACCESS: distinct devices may access each other
  std::map<int, AttributeOverride> attributes;  // SIMDEV_ATTRS="145:0,141:invalid"
  std::string fail_spec;                        // SIMDEV_FAIL, applied by faults.cpp
  bool host_vmm = true;                         // SIMDEV_HOST_VMM: HOST/HOST_NUMA cuMemCreate offered
  uint64_t host_vmm_granularity = 0;            // SIMDEV_HOST_VMM_GRANULARITY (0: the device's)
  bool report_faults = false;  // SIMDEV_REPORT_FAULTS: a stderr line per device fault, as a debugger would show
  int driver_version = 0;  // SIMDEV_DRIVER_VERSION; the toolkit's CUDA_VERSION unless set
  std::string error;  // non-empty: a variable was malformed; cuInit refuses
};

// Parses "4GiB", "256MiB", "1048576", "1.5GB"; nullopt when malformed.
std::optional<uint64_t> parse_bytes(const std::string& text);

Config load_config_from_env();

}  // namespace simdev
