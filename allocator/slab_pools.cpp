#include "slab_pools.h"

#include <algorithm>
#include <bit>
#include <new>

namespace tierrt::alloc {

SlabPools::~SlabPools() {
  for (auto& pools : pools_)
    for (auto& p : pools) p->partial.clear();
  for (Slab* s : slabs_) {
    arena_.destroy_range(s->range);
    delete s;
  }
}

SlabPools::Pool* SlabPools::pool_locked(unsigned shift, CUstream s) noexcept {
  for (auto& p : pools_[shift])
    if (p->stream == s) return p.get();
  return nullptr;
}

CUresult SlabPools::allocate(CUdeviceptr* out, std::size_t bytes, CUstream s) noexcept {
  const unsigned shift = std::max<unsigned>(kMinShift, std::bit_width(bytes - 1));
  {
    std::lock_guard<RankedMutex> g(mu_);
    Pool* p = pool_locked(shift, s);
    if (p != nullptr && !p->partial.empty()) {
      Slab& sl = p->partial.front();
      const std::uint32_t idx = sl.free_slots.back();
      sl.free_slots.pop_back();
      if (sl.free_slots.empty()) p->partial.pop_front();
      *out = sl.range.va + (CUdeviceptr{idx} << shift);
      return CUDA_SUCCESS;
    }
  }
  Slab* sl = nullptr;
  const CUresult r = new_slab(shift, s, &sl);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<RankedMutex> g(mu_);
  Pool* p = pool_locked(shift, s);
  if (p == nullptr) {
    pools_[shift].push_back(std::make_unique<Pool>());
    p = pools_[shift].back().get();
    p->stream = s;
  }
  slabs_.push_back(sl);
  if (!sl->free_slots.empty()) p->partial.push_back(*sl);
  *out = sl->range.va;  // slot 0
  return CUDA_SUCCESS;
}

CUresult SlabPools::new_slab(unsigned shift, CUstream s, Slab** out) noexcept {
  auto* sl = new (std::nothrow) Slab();
  if (sl == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  const std::size_t bytes = arena_.round_up(std::size_t{2} << 20);
  const CUresult r = arena_.create_range(bytes, reinterpret_cast<std::uintptr_t>(sl) | kTag, Claimant{}, &sl->range);
  if (r != CUDA_SUCCESS) {
    delete sl;
    return r;
  }
  sl->size_shift = shift;
  sl->stream = s;
  const auto capacity = static_cast<std::uint32_t>(bytes >> shift);
  sl->free_slots.reserve(capacity);
  for (std::uint32_t i = capacity; i-- > 1;) sl->free_slots.push_back(i);
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  made_.fetch_add(1, std::memory_order_relaxed);
  *out = sl;
  return CUDA_SUCCESS;
}

void SlabPools::free(Slab* sl, CUdeviceptr p) noexcept {
  const CUdeviceptr off = p - sl->range.va;
  if ((off & ((CUdeviceptr{1} << sl->size_shift) - 1)) != 0) return;  // not a slot start
  std::lock_guard<RankedMutex> g(mu_);
  if (sl->free_slots.empty())
    if (Pool* pool = pool_locked(sl->size_shift, sl->stream)) pool->partial.push_back(*sl);
  sl->free_slots.push_back(static_cast<std::uint32_t>(off >> sl->size_shift));
}

}  // namespace tierrt::alloc
