#include "host_backing.h"

#include <new>

#include "allocator/budget_defaults.h"
#include "copy_backing.h"
#include "remap_backing.h"

namespace tierrt::alloc {

std::unique_ptr<HostBacking> HostBacking::create(const Options& opt, DeviceArena& arena) noexcept {
  const std::uint64_t budget = opt.host_budget ? opt.host_budget : default_host_budget(physical_ram());
  CUmemLocation where{};
  std::unique_ptr<HostBacking> b;
  if (opt.mode != SpillMode::Copy && RemapBacking::supported(arena, &where))
    b.reset(new (std::nothrow) RemapBacking(arena, budget, where));
  else
    b.reset(new (std::nothrow) CopyBacking(arena, budget, opt.pinned_chunk));
  if (b) b->budget_.set_share(opt.host_share);
  return b;
}

bool HostBacking::reserve(const Block& b, HostCopy* to) noexcept {
  to->size = b.size;
  to->bytes = host_bytes(b);
  if (budget_.try_reserve(to->bytes)) return true;
  to->bytes = 0;
  return false;
}

}  // namespace tierrt::alloc
