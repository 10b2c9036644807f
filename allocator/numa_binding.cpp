#include "numa_binding.h"

#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace tierrt::alloc::numa {

namespace {

// Node masks as wide as the largest kernel configuration (NODES_SHIFT 10):
// get_mempolicy refuses a mask narrower than the kernel's node count.
constexpr int kMaxNodes = 1024;
constexpr int kBitsPerWord = 8 * sizeof(unsigned long);
struct NodeMask {
  unsigned long words[kMaxNodes / kBitsPerWord] = {};
  bool has(int node) const { return (words[node / kBitsPerWord] >> (node % kBitsPerWord)) & 1ul; }
  void set(int node) { words[node / kBitsPerWord] |= 1ul << (node % kBitsPerWord); }
};

const char* errno_phrase(int err) {
  switch (err) {
    case ENOSYS: return "the kernel has no NUMA support (ENOSYS)";
    case EPERM: return "memory policies are not permitted here (EPERM; a container without CAP_SYS_NICE?)";
    case EINVAL: return "the kernel refused the node (EINVAL)";
    case ENOMEM: return "the kernel had no memory for the policy (ENOMEM)";
    default: return "the kernel refused the memory policy";
  }
}

}  // namespace

const char* unusable_reason(int node) noexcept {
  if (node < 0 || node >= kMaxNodes) return "not a memory node of this host";
  NodeMask allowed;
  if (syscall(SYS_get_mempolicy, nullptr, allowed.words, static_cast<unsigned long>(kMaxNodes), nullptr,
              MPOL_F_MEMS_ALLOWED) != 0)
    return errno_phrase(errno);
  return allowed.has(node) ? nullptr : "not a memory node this process may use on this host";
}

int prefer_node(void* p, std::size_t bytes, int node) noexcept {
  if (node < 0 || node >= kMaxNodes) return EINVAL;
  NodeMask want;
  want.set(node);
  // The kernel reads maxnode - 1 bits (an off-by-one every caller, libnuma
  // included, compensates for).
  if (syscall(SYS_mbind, p, static_cast<unsigned long>(bytes), MPOL_PREFERRED, want.words,
              static_cast<unsigned long>(kMaxNodes + 1), 0u) != 0)
    return errno;
  return 0;
}

const char* binding_failure(int err) noexcept { return errno_phrase(err); }

bool bytes_on_node(const void* p, std::size_t bytes, int node, std::uint64_t* out) noexcept {
  static const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return false;
  // move_pages with no target nodes only reports where each page is; asked
  // in batches on the stack, as it runs on the pinned pool's growth path.
  constexpr unsigned long kBatch = 256;
  const void* pages[kBatch];
  int where[kBatch];
  const auto* base = static_cast<const char*>(p);
  const std::size_t count = bytes / static_cast<std::size_t>(page);
  std::uint64_t on = 0;
  for (std::size_t i = 0; i < count; i += kBatch) {
    const unsigned long n = count - i < kBatch ? count - i : kBatch;
    for (unsigned long j = 0; j < n; ++j) pages[j] = base + (i + j) * static_cast<std::size_t>(page);
    if (syscall(SYS_move_pages, 0, n, pages, nullptr, where, 0) != 0) return false;
    for (unsigned long j = 0; j < n; ++j)
      if (where[j] == node) on += static_cast<std::uint64_t>(page);
  }
  *out = on;
  return true;
}

}  // namespace tierrt::alloc::numa
