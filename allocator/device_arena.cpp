#include "device_arena.h"

#include <algorithm>
#include <bit>
#include <new>

#include "allocator/budget_defaults.h"
#include "driver/driver.h"

namespace tierrt::alloc {

namespace {

CUmemAllocationProp device_chunk_prop(CUdevice dev, bool exportable = false) noexcept {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  // Exportable as a POSIX fd, so that IPC of tierrt's memory can share the
  // chunk behind an allocation (runtime/ipc_shim).
  if (exportable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

}  // namespace

CUresult DeviceArena::init(std::uint64_t budget) noexcept {
  CUresult r = TIERRT_CU(cuCtxGetCurrent, &ctx_);
  if (r != CUDA_SUCCESS) return r;
  if (ctx_ == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if ((r = TIERRT_CU(cuCtxGetDevice, &dev_)) != CUDA_SUCCESS) return r;
  const CUmemAllocationProp prop = device_chunk_prop(dev_);
  r = TIERRT_CU(cuMemGetAllocationGranularity, &gran_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) return r;
  if (gran_ == 0 || !std::has_single_bit(gran_)) return CUDA_ERROR_NOT_SUPPORTED;
  table_.reset(new (std::nothrow) GranuleTable(std::countr_zero(gran_)));
  if (table_ == nullptr || !table_->valid()) return CUDA_ERROR_OUT_OF_MEMORY;
  std::size_t total = 0;
  if ((r = TIERRT_CU(cuDeviceTotalMem, &total, dev_)) != CUDA_SUCCESS) return r;
  budget_.set_limit(budget ? budget : default_device_budget(total));
  int posix_fd = 0;
  exportable_.store(TIERRT_CU(cuDeviceGetAttribute, &posix_fd,
                              CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev_) == CUDA_SUCCESS &&
                    posix_fd != 0);
  // Spares count against the budget; a rescue gives them back first.
  spares_.set_limit(std::min<std::uint64_t>(1ull << 30, budget_.limit() / 4));
  return CUDA_SUCCESS;
}

DeviceArena::~DeviceArena() { release_spares(UINT64_MAX); }

CUresult DeviceArena::create_range(std::size_t bytes, std::uintptr_t owner, const Claimant& who,
                                   DeviceRange* out) noexcept {
  DeviceRange r{0, bytes, 0};
  CUresult e = reserve_address(bytes, &r.va);
  if (e != CUDA_SUCCESS) return e;
  if ((e = obtain_chunk(bytes, &r.chunk, who)) != CUDA_SUCCESS) {
    free_address(r.va, bytes);
    return e;
  }
  bool stuck = false;
  if ((e = map(r.va, bytes, r.chunk, nullptr, &stuck)) != CUDA_SUCCESS) {
    // A chunk still mapped keeps its range: both are left, never reused.
    if (!stuck) {
      give_chunk(r.chunk, bytes);
      free_address(r.va, bytes);
    }
    return e;
  }
  if (!table_->insert(r.va, bytes, owner)) {
    if (unmap(r.va, bytes) == CUDA_SUCCESS) {
      give_chunk(r.chunk, bytes);
      free_address(r.va, bytes);
    }
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  *out = r;
  return CUDA_SUCCESS;
}

void DeviceArena::destroy_range(const DeviceRange& r) noexcept {
  table_->erase(r.va, r.bytes);
  // A chunk the range could not be taken off stays with it: neither is
  // reused while the mapping lasts.
  if (r.chunk != 0 && unmap(r.va, r.bytes) != CUDA_SUCCESS) return;
  if (r.chunk != 0) release_chunk(r.chunk, r.bytes);
  free_address(r.va, r.bytes);
}

bool DeviceArena::reserve(std::uint64_t bytes, const Claimant& who) noexcept {
  while (!budget_.try_reserve(bytes)) {
    const std::uint64_t short_by = bytes - std::min(bytes, budget_.available());
    if (reclaimer_ != nullptr && reclaimer_->make_room(short_by, who)) continue;
    if (!who.may_exceed_budget) return budget_.try_reserve(bytes);
    // Nothing more can be freed: the budget is a target, never a reason to
    // fail. cuMemCreate says whether the device has room.
    if (budget_.force_reserve(bytes) && reclaimer_ != nullptr) reclaimer_->over_budget(budget_.used(), budget_.limit());
    return true;
  }
  return true;
}

CUresult DeviceArena::create_chunk(std::size_t bytes, Handle* out, const Claimant& who, bool rescue) noexcept {
  for (;;) {
    const bool exportable = exportable_.load(std::memory_order_relaxed);
    const CUmemAllocationProp prop = device_chunk_prop(dev_, exportable);
    const CUresult r = TIERRT_CU(cuMemCreate, out, bytes, &prop, 0ull);
    // A driver that says it supports fds and still refuses an exportable
    // chunk (seen in containers): chunks are made as before, for good.
    if (exportable && r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY) {
      exportable_.store(false, std::memory_order_relaxed);
      continue;
    }
    // The driver is out of memory although the budget was not: free some.
    if (r != CUDA_ERROR_OUT_OF_MEMORY || !rescue || reclaimer_ == nullptr || !reclaimer_->make_room(bytes, who))
      return r;
  }
}

CUresult DeviceArena::obtain_chunk(std::size_t bytes, Handle* out, const Claimant& who, bool* created) noexcept {
  if (created != nullptr) *created = false;
  // A spare holds its share of the budget already (and a rescue would
  // release it first).
  if (spares_.take(bytes, out)) return CUDA_SUCCESS;
  if (!reserve(bytes, who)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = create_chunk(bytes, out, who);
  if (r != CUDA_SUCCESS) budget_.release(bytes);
  else if (created != nullptr) *created = true;
  return r;
}

bool DeviceArena::obtain_chunk_at_once(std::size_t bytes, Handle* out, bool* created) noexcept {
  if (created != nullptr) *created = false;
  if (spares_.take(bytes, out)) return true;
  if (!budget_.try_reserve(bytes)) return false;
  if (create_chunk(bytes, out, Claimant{}, /*rescue=*/false) == CUDA_SUCCESS) {
    if (created != nullptr) *created = true;
    return true;
  }
  budget_.release(bytes);
  return false;
}

void DeviceArena::give_chunk(Handle h, std::size_t bytes) noexcept {
  if (!spares_.give(h, bytes)) release_chunk(h, bytes);
}

void DeviceArena::release_chunk(Handle h, std::size_t bytes) noexcept {
  // A chunk the driver would not release still holds its memory.
  if (TIERRT_CU(cuMemRelease, h) == CUDA_SUCCESS) budget_.release(bytes);
}

std::uint64_t DeviceArena::release_spares(std::uint64_t bytes) noexcept {
  std::uint64_t sum = 0;
  for (auto& [n, h] : spares_.take_all(bytes)) {
    release_chunk(h, n);
    sum += n;
  }
  return sum;
}

CUresult DeviceArena::map(CUdeviceptr va, std::size_t bytes, Handle h, const CUmemLocation* host,
                          bool* stuck) noexcept {
  if (stuck != nullptr) *stuck = false;
  CUresult r = TIERRT_CU(cuMemMap, va, bytes, 0, h, 0ull);
  if (r != CUDA_SUCCESS) return r;
  CUmemAccessDesc acc[2 + kMaxPeers]{};
  std::size_t n = 0;
  acc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc[n].location.id = dev_;
  acc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (host != nullptr) {
    acc[n].location = *host;
    acc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  for (std::uint64_t peers = peers_.load(std::memory_order_seq_cst); peers != 0; peers &= peers - 1) {
    acc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc[n].location.id = std::countr_zero(peers);
    acc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  r = TIERRT_CU(cuMemSetAccess, va, bytes, acc, n);
  if (r != CUDA_SUCCESS && unmap(va, bytes) != CUDA_SUCCESS && stuck != nullptr) *stuck = true;
  return r;
}

bool DeviceArena::add_peer(CUdevice peer) noexcept {
  if (peer < 0 || peer >= static_cast<CUdevice>(kMaxPeers) || peer == dev_) return false;
  const std::uint64_t bit = std::uint64_t{1} << peer;
  if (peers_.fetch_or(bit, std::memory_order_seq_cst) & bit) return true;
  if (!table_) return true;
  CUmemAccessDesc acc{};
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = peer;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  bool all = true;
  // A run is one owner's address range; parts of it may be unmapped (a
  // block spilled in copy mode): those are granted when they are mapped
  // again, so only the granules mapped now are asked for one by one.
  table_->for_each_run([&](std::uintptr_t base, std::size_t len, std::uintptr_t) {
    if (TIERRT_CU(cuMemSetAccess, base, len, &acc, 1) == CUDA_SUCCESS) return;
    for (CUdeviceptr at = base; at < base + len;) {
      CUdeviceptr mbase = 0;
      std::size_t msize = 0;
      if (TIERRT_CU(cuMemGetAddressRange, &mbase, &msize, at) != CUDA_SUCCESS || mbase + msize <= at) {
        at += gran_;  // nothing mapped here
        continue;
      }
      if (TIERRT_CU(cuMemSetAccess, mbase, msize, &acc, 1) != CUDA_SUCCESS) all = false;
      at = mbase + msize;
    }
  });
  return all;
}

CUresult DeviceArena::unmap(CUdeviceptr va, std::size_t bytes) noexcept {
  constexpr int kTries = 3;
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; i < kTries; ++i)
    if ((r = TIERRT_CU(cuMemUnmap, va, bytes)) == CUDA_SUCCESS) return r;
  return r;
}

CUresult DeviceArena::reserve_address(std::size_t bytes, CUdeviceptr* va) noexcept {
  return TIERRT_CU(cuMemAddressReserve, va, bytes, gran_, CUdeviceptr{0}, 0ull);
}

void DeviceArena::free_address(CUdeviceptr va, std::size_t bytes) noexcept {
  (void)TIERRT_CU(cuMemAddressFree, va, bytes);
}

}  // namespace tierrt::alloc
