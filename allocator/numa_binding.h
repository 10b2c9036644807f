// Host pages on a NUMA node, through the kernel's memory-policy system calls
// (mbind, get_mempolicy, move_pages) made directly: tierrt needs neither
// libnuma nor its headers, and a host without them still runs it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierrt::alloc::numa {

// Null when `node` is a memory node this process may allocate on; else why
// not, a short phrase in static storage.
const char* unusable_reason(int node) noexcept;

// Pages of [p, p + bytes) not faulted in yet go to `node` when they are,
// or to another node when it is full (MPOL_PREFERRED, never MPOL_BIND: a
// full node must not fail a job that would run without tierrt). 0, or the
// errno.
int prefer_node(void* p, std::size_t bytes, int node) noexcept;

// Why prefer_node failed, a short phrase in static storage.
const char* binding_failure(int err) noexcept;

// Of [p, p + bytes) (page-aligned, faulted in), the bytes on `node` now.
// False when the kernel does not say.
bool bytes_on_node(const void* p, std::size_t bytes, int node, std::uint64_t* out) noexcept;

}  // namespace tierrt::alloc::numa
