#include "host_tier.h"

#include <algorithm>
#include <map>
#include <new>
#include <vector>

#include "allocator/allocator.h"
#include "driver/driver.h"
#include "jemalloc_shim.h"
#include "numa_binding.h"
#include "pinned_chunk.h"

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

  void add_chunk(const PinnedChunk& c) {
    std::lock_guard<RankedMutex> g(mu_);
    const auto b = reinterpret_cast<std::uintptr_t>(c.base);
    chunks_.emplace(b, c);
    free_.emplace(b, c.size);
    bytes_ += c.size;
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

  std::vector<PinnedChunk> chunks() const {
    std::lock_guard<RankedMutex> g(mu_);
    std::vector<PinnedChunk> v;
    for (auto& [b, c] : chunks_) v.push_back(c);
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
    if (a >= it->first + it->second.size) return {0, 0};
    return {it->first, it->second.size};
  }

  // Rank 70 (lock_rank.h): jemalloc's extent hooks take it inside
  // alloc.host_tier; nothing is taken inside it.
  mutable RankedMutex mu_{kRankPinnedPool, "alloc.pinned_pool"};
  std::map<std::uintptr_t, PinnedChunk> chunks_;
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
  const CUresult r = TIERRT_CU(cuMemCreate, out, bytes, &prop, 0ull);
  if (r == CUDA_SUCCESS) host_chunk_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return r;
}

CUresult HostTier::take_host_chunk(std::size_t bytes,
                                   CUmemGenericAllocationHandle* out) noexcept {
  if (spares_.take(bytes, out)) return CUDA_SUCCESS;
  return create_host_chunk(bytes, out);
}

void HostTier::give_host_chunk(CUmemGenericAllocationHandle h, std::size_t bytes) noexcept {
  if (!spares_.give(h, bytes)) release_host_chunk(h, bytes);
}

void HostTier::release_host_chunk(CUmemGenericAllocationHandle h, std::size_t bytes) noexcept {
  (void)TIERRT_CU(cuMemRelease, h);
  host_chunk_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

void HostTier::configure_pool(std::size_t chunk_bytes, std::uint64_t pool_limit) noexcept {
  std::lock_guard<RankedMutex> g(mu_);
  chunk_bytes_ = std::max<std::size_t>(chunk_bytes, 2u << 20);
  pool_limit_ = pool_limit;
}

void HostTier::place_pinned_on(int node, bool can_register) noexcept {
  std::lock_guard<RankedMutex> g(mu_);
  pin_node_ = node < 0 ? -1 : node;
  node_problem_ = nullptr;
  if (pin_node_ >= 0 && !can_register)
    node_problem_ = "the device cannot page-lock mapped host memory (HOST_REGISTER_SUPPORTED is 0)";
  else if (pin_node_ >= 0)
    node_problem_ = numa::unusable_reason(pin_node_);
  placing_ = pin_node_ >= 0 && node_problem_ == nullptr;
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
    PinnedChunk chunk;
    const char* unplaceable = nullptr;
    if (make_pinned_chunk(want, placing_ ? pin_node_ : -1, &chunk, &unplaceable) != CUDA_SUCCESS) return nullptr;
    if (unplaceable != nullptr) {  // this chunk is used unplaced, and so are the next
      placing_ = false;
      node_problem_ = unplaceable;
    }
    pool_->add_chunk(chunk);
    on_node_bytes_ += chunk.on_node;
    unplaced_bytes_ += chunk.size - chunk.on_node;
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

void HostTier::fill_placement(Stats* s) const noexcept {
  if (remap_) {
    const bool on_node = loc_type_ == CU_MEM_LOCATION_TYPE_HOST_NUMA;
    s->host_placement = on_node ? HostPlacement::OnNode : HostPlacement::DriverChoice;
    s->host_node = on_node ? loc_id_ : -1;
    s->host_node_bytes = on_node ? host_chunk_bytes_.load(std::memory_order_relaxed) : 0;
    s->host_unplaced_bytes = 0;
    s->host_node_problem = nullptr;
    return;
  }
  std::lock_guard<RankedMutex> g(mu_);
  // A node given up after some chunks were bound still holds those.
  if (pin_node_ < 0) s->host_placement = HostPlacement::FirstTouch;
  else if (placing_ || on_node_bytes_ != 0) s->host_placement = HostPlacement::OnNode;
  else s->host_placement = HostPlacement::Unplaced;
  s->host_node = pin_node_;
  s->host_node_bytes = on_node_bytes_;
  s->host_unplaced_bytes = unplaced_bytes_;
  s->host_node_problem = node_problem_;
}

void HostTier::shutdown() noexcept {
  for (auto& [bytes, h] : spares_.take_all()) release_host_chunk(h, bytes);
  std::lock_guard<RankedMutex> g(mu_);
  if (pool_ == nullptr) return;
  if (pool_->arena_ok) tierrt_je_arena_destroy(pool_->arena);
  for (const PinnedChunk& c : pool_->chunks()) free_pinned_chunk(c);
  delete pool_;
  pool_ = nullptr;
  on_node_bytes_ = unplaced_bytes_ = 0;
}

}  // namespace tierrt::alloc
