// The memory limit of the cgroup this process runs in: cgroup v2
// `memory.max`, v1 `memory.limit_in_bytes`, the lowest over the process's
// cgroup and its ancestors (a limit on any of them applies to it).
#pragma once

#include <cstdint>
#include <string>

namespace tierrt {

// Bytes, or 0 when no limit is set or none can be read. `proc_cgroup` is
// the /proc/PID/cgroup listing and `cgroup_root` where the hierarchies are
// mounted; tests point both at a tree of their own.
std::uint64_t cgroup_memory_limit(const std::string& proc_cgroup = "/proc/self/cgroup",
                                  const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace tierrt
