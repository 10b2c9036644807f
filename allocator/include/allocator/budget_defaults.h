// The default budgets, defined once: the settings resolve TIERRT_*_BUDGET
// with them, and the allocator uses them when created with a budget of 0.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace tierrt::alloc {

// Device memory less a reserve for the driver and libraries (1/16 of the
// device, at most 512 MiB).
constexpr std::uint64_t default_device_budget(std::uint64_t device_total) noexcept {
  return device_total - std::min<std::uint64_t>(512ull << 20, device_total / 16);
}

// Half of physical memory: the job keeps the other half.
constexpr std::uint64_t default_host_budget(std::uint64_t physical_ram) noexcept { return physical_ram / 2; }

// Bytes of physical memory; 0 when the system cannot tell.
inline std::uint64_t physical_ram() noexcept {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

}  // namespace tierrt::alloc
