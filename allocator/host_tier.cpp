#include "host_tier.h"

#include <algorithm>
#include <map>
#include <new>
#include <vector>

#include "jemalloc_shim.h"
#include "driver/driver.h"

namespace tierrt::alloc {

// Pinned chunks and the free ranges inside them. jemalloc's extent hooks
// carve from here; they never call the driver (growth happens outside
// jemalloc, in HostTier::alloc_pinned).
class PinnedPool {
 public:
  struct Chunk {
    std::uintptr_t base;
    std::size_t size;
  };

  void add_chunk(void* p, std::size_t size) {
    std::lock_guard<RankedMutex> g(mu_);
    const auto b = reinterpret_cast<std::uintptr_t>(p);
    chunks_.emplace(b, size);
    free_.emplace(b, size);
    bytes_ += size;
  }

  void* carve(std::size_t size, std::size_t align) {
    std::lock_guard<RankedMutex> g(mu_);
    if (align == 0) align = 1;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      const std::uintptr_t b = it->first, e = it->first + it->second;
      const std::uintptr_t a = (b + align - 1) & ~(std::uintptr_t{align} - 1);
      if (a < b || a + size > e) continue;
      free_.erase(it);
      if (a > b) free_.emplace(b, a - b);
      if (a + size < e) free_.emplace(a + size, e - (a + size));
      return reinterpret_cast<void*>(a);
    }
    return nullptr;
  }

  void give_back(void* p, std::size_t size) {
    std::lock_guard<RankedMutex> g(mu_);
    std::uintptr_t b = reinterpret_cast<std::uintptr_t>(p), e = b + size;
    const Chunk c = chunk_of(b);
    auto next = free_.lower_bound(b);
    if (next != free_.end() && next->first == e && next->first < c.base + c.size) {
      e = next->first + next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == b && prev->first >= c.base) {
        b = prev->first;
        free_.erase(prev);
      }
    }
    free_.emplace(b, e - b);
  }

  bool same_chunk(void* a, void* b) {
    std::lock_guard<RankedMutex> g(mu_);
    const Chunk x = chunk_of(reinterpret_cast<std::uintptr_t>(a));
    const Chunk y = chunk_of(reinterpret_cast<std::uintptr_t>(b));
    return x.base != 0 && x.base == y.base;
  }

  std::uint64_t bytes() const {
    std::lock_guard<RankedMutex> g(mu_);
    return bytes_;
  }

  std::vector<Chunk> chunks() const {
    std::lock_guard<RankedMutex> g(mu_);
    std::vector<Chunk> v;
    for (auto& [b, s] : chunks_) v.push_back({b, s});
    return v;
  }

  tierrt_je_ops ops{};
  unsigned arena = 0;
  bool arena_ok = false;

 private:
  Chunk chunk_of(std::uintptr_t a) const {
    auto it = chunks_.upper_bound(a);
    if (it == chunks_.begin()) return {0, 0};
    --it;
    if (a >= it->first + it->second) return {0, 0};
    return {it->first, it->second};
  }

  // Rank 70 (lock_rank.h): jemalloc's extent hooks take it inside
  // alloc.host_tier; nothing is taken inside it.
  mutable RankedMutex mu_{kRankPinnedPool, "alloc.pinned_pool"};
  std::map<std::uintptr_t, std::size_t> chunks_;
  std::map<std::uintptr_t, std::size_t> free_;
  std::uint64_t bytes_ = 0;
};

namespace {
void* ops_alloc(void* ctx, std::size_t size, std::size_t align) {
  return static_cast<PinnedPool*>(ctx)->carve(size, align);
}
void ops_dalloc(void* ctx, void* addr, std::size_t size) {
  static_cast<PinnedPool*>(ctx)->give_back(addr, size);
}
bool ops_same_chunk(void* ctx, void* a, void* b) {
  return static_cast<PinnedPool*>(ctx)->same_chunk(a, b);
}
}  // namespace

HostTier::~HostTier() { shutdown(); }

CUresult HostTier::create_host_chunk(std::size_t bytes,
                                     CUmemGenericAllocationHandle* out) noexcept {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = loc_type_;
  prop.location.id = loc_type_ == CU_MEM_LOCATION_TYPE_HOST_NUMA ? loc_id_ : 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  return TIERRT_CU(cuMemCreate, out, bytes, &prop, 0ull);
}

CUresult HostTier::take_host_chunk(std::size_t bytes,
                                   CUmemGenericAllocationHandle* out) noexcept {
  if (spares_.take(bytes, out)) return CUDA_SUCCESS;
  return create_host_chunk(bytes, out);
}

void HostTier::give_host_chunk(CUmemGenericAllocationHandle h, std::size_t bytes) noexcept {
  if (!spares_.give(h, bytes)) (void)TIERRT_CU(cuMemRelease, h);
}

void HostTier::configure_pool(std::size_t chunk_bytes, std::uint64_t pool_limit) noexcept {
  std::lock_guard<RankedMutex> g(mu_);
  chunk_bytes_ = std::max<std::size_t>(chunk_bytes, 2u << 20);
  pool_limit_ = pool_limit;
}

void* HostTier::alloc_pinned(std::size_t bytes) noexcept {
  std::lock_guard<RankedMutex> g(mu_);
  if (pool_ == nullptr) pool_ = new (std::nothrow) PinnedPool();
  if (pool_ == nullptr) return nullptr;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (pool_->arena_ok) {
      if (void* p = tierrt_je_alloc(pool_->arena, bytes)) return p;
    }
    // Grow by whole chunks, enough for this buffer with room for jemalloc's
    // alignment and metadata.
    const std::size_t want = std::max<std::size_t>(
        chunk_bytes_, ((bytes + bytes / 8 + (4u << 20)) + (2u << 20) - 1) & ~std::size_t((2u << 20) - 1));
    if (pool_->bytes() + want > pool_limit_) return nullptr;
    void* chunk = nullptr;
    if (TIERRT_CU(cuMemHostAlloc, &chunk, want, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS)
      return nullptr;
    pool_->add_chunk(chunk, want);
    if (!pool_->arena_ok) {
      pool_->ops = tierrt_je_ops{pool_, ops_alloc, ops_dalloc, ops_same_chunk};
      if (tierrt_je_arena_create(&pool_->ops, &pool_->arena) != 0) return nullptr;
      pool_->arena_ok = true;
    }
  }
  return nullptr;
}

void HostTier::free_pinned(void* p) noexcept {
  if (p != nullptr) tierrt_je_free(p);
}

std::uint64_t HostTier::pinned_pool_bytes() const noexcept {
  std::lock_guard<RankedMutex> g(mu_);  // pool_ is created by the first alloc_pinned
  return pool_ ? pool_->bytes() : 0;
}

void HostTier::shutdown() noexcept {
  for (auto& [bytes, h] : spares_.take_all()) (void)TIERRT_CU(cuMemRelease, h);
  std::lock_guard<RankedMutex> g(mu_);
  if (pool_ == nullptr) return;
  if (pool_->arena_ok) tierrt_je_arena_destroy(pool_->arena);
  for (const auto& c : pool_->chunks())
    (void)TIERRT_CU(cuMemFreeHost, reinterpret_cast<void*>(c.base));
  delete pool_;
  pool_ = nullptr;
}

}  // namespace tierrt::alloc
