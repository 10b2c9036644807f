// The device arena: blocks with their own VA reservations, the size-ordered
// cache of freed blocks, small-object slabs, budgets and the OOM rescue.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <bit>

#include "allocator/impl.h"

namespace tierrt::alloc {

namespace {
std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }
}  // namespace

CUresult Impl::init() noexcept {
  try {
    CUresult r = TIERRT_CU(cuCtxGetCurrent, &ctx);
    if (r != CUDA_SUCCESS) return r;
    if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    TIERRT_CU_CHECK(cuCtxGetDevice, &dev);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    TIERRT_CU_CHECK(cuMemGetAllocationGranularity, &gran, &prop,
                    CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (gran == 0 || !std::has_single_bit(gran)) return CUDA_ERROR_NOT_SUPPORTED;
    table = std::make_unique<GranuleTable>(std::countr_zero(gran));
    TIERRT_CU_CHECK(cuDeviceTotalMem, &device_total, dev);

    dev_budget.set_limit(opt.device_budget
                             ? opt.device_budget
                             : device_total - std::min<std::uint64_t>(512u << 20, device_total / 16));
    std::uint64_t host_total =
        static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
    host_budget.set_limit(opt.host_budget ? opt.host_budget : host_total / 2);

    // Spill mode: remap where host VMM works (probed by creating one chunk).
    mode = SpillMode::Copy;
    if (opt.mode != SpillMode::Copy) {
      int host_vmm = 0, numa_vmm = 0, numa_id = -1;
      if (TIERRT_CU(cuDeviceGetAttribute, &host_vmm,
                    CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS)
        host_vmm = 0;  // some 12.x drivers answer CUDA_ERROR_INVALID_VALUE here
      if (TIERRT_CU(cuDeviceGetAttribute, &numa_vmm,
                    CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS)
        numa_vmm = 0;
      if (TIERRT_CU(cuDeviceGetAttribute, &numa_id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev) != CUDA_SUCCESS)
        numa_id = -1;
      if (numa_vmm && numa_id >= 0)
        host.set_location(CU_MEM_LOCATION_TYPE_HOST_NUMA, numa_id);
      else
        host.set_location(CU_MEM_LOCATION_TYPE_HOST, 0);
      if (host_vmm || numa_vmm) {
        CUmemGenericAllocationHandle h = 0;
        if (host.create_host_chunk(gran, &h) == CUDA_SUCCESS) {
          (void)TIERRT_CU(cuMemRelease, h);
          mode = SpillMode::Remap;
        }
      }
    }
    host.configure_pool(opt.pinned_chunk, host_budget.limit() + opt.pinned_chunk);
    host.set_spare_limit(std::min<std::uint64_t>(1ull << 30, host_budget.limit() / 4));
    // Spare device chunks count against the budget; the first thing a
    // rescue gives back.
    dev_spares.set_limit(std::min<std::uint64_t>(1ull << 30, dev_budget.limit() / 4));

    int least = 0, greatest = 0;
    if (TIERRT_CU(cuCtxGetStreamPriorityRange, &least, &greatest) != CUDA_SUCCESS) least = greatest = 0;
    TIERRT_CU_CHECK(cuStreamCreateWithPriority, &d2h, CU_STREAM_NON_BLOCKING, least);
    TIERRT_CU_CHECK(cuStreamCreateWithPriority, &h2d, CU_STREAM_NON_BLOCKING, greatest);
    mover = std::thread([this] { mover_loop(); });
    return CUDA_SUCCESS;
  } catch (const drv::Error& e) {
    return e.code();
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
}

Impl::~Impl() {
  if (mover.joinable()) {
    drain();
    {
      std::lock_guard<std::mutex> g(mu);
      stopping = true;
    }
    mover_cv.notify_all();
    mover.join();
  }
  if (ctx != nullptr) {
    (void)TIERRT_CU(cuCtxSetCurrent, ctx);
    (void)TIERRT_CU(cuCtxSynchronize);
  }
  std::vector<Block*> live;
  cache.for_each([&](Block* b) { live.push_back(b); });
  for (Block* b : live) cache.erase(b);
  lru.clear();
  pool.clear();
  for (Block& b : storage) {
    if (b.va == 0) continue;
    for (int i = 0; i < b.nuses; ++i) unref(b.uses[i].ev);
    b.nuses = 0;
    if (UseEvent* r = b.ready.exchange(nullptr)) unref(r);
    destroy_block(&b);
  }
  pool.clear();
  for (auto& pools : slab_pools)
    for (auto& p : pools) p->partial.clear();
  for (Slab* s : all_slabs) {
    (void)TIERRT_CU(cuMemUnmap, s->base, s->bytes);
    (void)TIERRT_CU(cuMemRelease, s->handle);
    (void)TIERRT_CU(cuMemAddressFree, s->base, s->bytes);
    delete s;
  }
  for (CUdeviceptr p : raw) (void)TIERRT_CU(cuMemFree, p);
  release_spares(UINT64_MAX);
  for (UseEvent& e : ev_storage)
    if (e.ev) (void)TIERRT_CU(cuEventDestroy, e.ev);
  for (CUevent e : timing_free) (void)TIERRT_CU(cuEventDestroy, e);
  if (d2h) (void)TIERRT_CU(cuStreamDestroy, d2h);
  if (h2d) (void)TIERRT_CU(cuStreamDestroy, h2d);
  host.shutdown();
}

Block* Impl::new_block() {
  std::lock_guard<std::mutex> g(mu);
  if (!pool.empty()) {
    Block* b = &pool.front();
    pool.pop_front();
    return b;
  }
  storage.emplace_back();
  return &storage.back();
}

void Impl::recycle_block(Block* b) {
  std::lock_guard<std::mutex> g(mu);
  if (b->counted_freed) {
    --st_blocks[static_cast<int>(State::Freed)];
    st_bytes[static_cast<int>(State::Freed)] -= b->size;
    b->counted_freed = false;
  }
  b->va = b->shadow = 0;
  b->size = b->mapped = 0;
  b->dev = b->host = 0;
  b->host_buf = nullptr;
  b->host_bytes = 0;
  b->remapping = b->captured = false;
  b->ops_pending = 0;
  b->nuses = 0;
  b->cls = 0;
  pool.push_back(*b);
}

CUresult Impl::map_rw(CUdeviceptr va, std::size_t bytes, CUmemGenericAllocationHandle h,
                      bool host_too) {
  CUresult r = TIERRT_CU(cuMemMap, va, bytes, 0, h, 0ull);
  if (r != CUDA_SUCCESS) return r;
  CUmemAccessDesc acc[2]{};
  acc[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc[0].location.id = dev;
  acc[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  acc[1].location.type = host.location_type();
  acc[1].location.id = host.location_type() == CU_MEM_LOCATION_TYPE_HOST_NUMA ? host.location_id() : 0;
  acc[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = TIERRT_CU(cuMemSetAccess, va, bytes, acc, host_too ? 2 : 1);
  if (r != CUDA_SUCCESS) (void)TIERRT_CU(cuMemUnmap, va, bytes);
  return r;
}

CUresult Impl::create_device_chunk(std::size_t bytes, CUmemGenericAllocationHandle* h,
                                   bool spill_ok, const Block* except) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  for (int attempt = 0; attempt < 8; ++attempt) {
    r = TIERRT_CU(cuMemCreate, h, bytes, &prop, 0ull);
    if (r != CUDA_ERROR_OUT_OF_MEMORY) return r;
    // The driver is out of memory although the budget was not: free some.
    if (rescue(bytes, spill_ok, except) == Rescue::Nothing) break;
  }
  return r;
}

CUresult Impl::obtain_device_chunk(std::size_t bytes, CUmemGenericAllocationHandle* h, bool spill_ok,
                                   const Block* except) {
  // Before reserving: a spare of this size holds its share of the budget
  // already, and a rescue would release it first.
  if (dev_spares.take(bytes, h)) return CUDA_SUCCESS;
  if (!reserve_device(bytes, spill_ok, except)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = create_device_chunk(bytes, h, spill_ok, except);
  if (r != CUDA_SUCCESS) dev_budget.release(bytes);
  return r;
}

void Impl::give_device_chunk(CUmemGenericAllocationHandle h, std::size_t bytes) {
  if (dev_spares.give(h, bytes)) return;  // its budget share stays held
  (void)TIERRT_CU(cuMemRelease, h);
  dev_budget.release(bytes);
}

std::uint64_t Impl::release_spares(std::uint64_t bytes) {
  std::uint64_t sum = 0;
  for (auto& [n, h] : dev_spares.take_all(bytes)) {
    (void)TIERRT_CU(cuMemRelease, h);
    dev_budget.release(n);
    sum += n;
  }
  return sum;
}

bool Impl::reserve_device(std::uint64_t bytes, bool spill_ok, const Block* except) {
  // Try again while rescues free memory (other threads may take it first).
  // Give up when a rescue can do nothing, or when every candidate stayed busy
  // for a long while: the blocks in the way may be pinned by the very launch
  // that needs the memory. Generous, as sanitizers and loaded machines
  // stretch other threads' pins; the last deadline only guards a livelock.
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  auto busy_since = Clock::time_point::max();
  for (;;) {
    if (dev_budget.try_reserve(bytes)) return true;
    const std::uint64_t avail = dev_budget.available();
    const Rescue r = rescue(bytes - std::min(bytes, avail), spill_ok, except);
    const auto now = Clock::now();
    if (r != Rescue::Busy) busy_since = Clock::time_point::max();
    else if (busy_since == Clock::time_point::max()) busy_since = now;
    if (r == Rescue::Nothing || now > deadline ||
        (busy_since != Clock::time_point::max() && now - busy_since > std::chrono::seconds(10)))
      return dev_budget.try_reserve(bytes);
  }
}

Impl::Rescue Impl::rescue(std::uint64_t bytes, bool spill_ok, const Block* except) {
  {
    std::lock_guard<std::mutex> g(mu);
    ++n_rescues;
  }
  const std::uint64_t freed = trim(bytes);
  const Rescue trimmed = freed > 0 ? Rescue::Freed : Rescue::Nothing;
  if (freed >= bytes || !spill_ok) return trimmed;
  std::uint64_t need = bytes - freed;
  std::vector<Block*> victims;
  bool moving = false, busy = false;
  std::size_t in_flight = 0;
  {
    std::lock_guard<std::mutex> g(mu);
    moving = spills_in_flight > 0;
    in_flight = ops_in_flight;
    std::uint64_t sum = 0;
    for (Block& b : lru) {
      if (sum >= need) break;
      if (&b == except || b.captured) continue;
      const State st = b.st();
      if (st != State::Resident && st != State::Fetching) continue;
      // Idle soon: a launch being enqueued, or a fetch not yet finalised.
      if (st == State::Fetching || b.ops_pending || b.pins.load() != 0 || b.ready.load() != nullptr) {
        busy = true;
        continue;
      }
      victims.push_back(&b);
      sum += b.mapped;
    }
  }
  bool started = false;
  for (Block* v : victims) {
    const SpillResult r = spill(v);
    if (r == SpillResult::Started) started = true;
    if (r == SpillResult::Busy || r == SpillResult::AlreadyMoving) busy = true;  // raced with a launch or a move
    if (r == SpillResult::HostFull) break;
  }
  if (!started && !moving) {
    if (!busy || freed > 0) return trimmed;
    // Every candidate is briefly busy (other threads' launches and fetches):
    // wait for a move to finish, or a moment, and let the caller look again.
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::milliseconds(2), [&] { return ops_in_flight < in_flight; });
    return Rescue::Busy;
  }
  // Wait for the spills in flight to release their device memory.
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return spills_in_flight == 0; });
  return Rescue::Freed;
}

std::uint64_t Impl::trim(std::uint64_t bytes) {
  std::vector<Block*> victims;
  std::uint64_t sum = release_spares(bytes);  // no work uses them: no synchronisation
  if (sum >= bytes) return sum;
  {
    std::lock_guard<std::mutex> g(mu);
    std::vector<Block*> all;
    cache.for_each([&](Block* b) { all.push_back(b); });
    for (auto it = all.rbegin(); it != all.rend() && sum < bytes; ++it) {
      Block* b = *it;
      if (b->ops_pending) continue;
      cache.erase(b);
      victims.push_back(b);
      sum += b->mapped;
    }
  }
  if (victims.empty()) return sum;
  // Work that used them (or ran on their free streams) must finish before
  // their memory is unmapped.
  (void)TIERRT_CU(cuCtxSynchronize);
  std::vector<UseEvent*> drop;
  {
    std::lock_guard<std::mutex> g(mu);
    for (Block* b : victims) clear_uses_locked(b, &drop);
    n_trimmed += sum;
  }
  for (UseEvent* e : drop) unref(e);
  for (Block* b : victims) destroy_block(b);
  return sum;
}

void Impl::destroy_block(Block* b) {
  if (b->dev != 0 || b->host != 0) (void)TIERRT_CU(cuMemUnmap, b->va, b->mapped);
  if (b->dev != 0) {
    (void)TIERRT_CU(cuMemRelease, b->dev);
    dev_budget.release(b->mapped);
  }
  if (b->host != 0) {
    (void)TIERRT_CU(cuMemUnmap, b->shadow, b->mapped);  // the host chunk's second mapping
    host.give_host_chunk(b->host, b->mapped);
  }
  if (b->host_buf != nullptr) host.free_pinned(b->host_buf);
  if (b->host_bytes) host_budget.release(b->host_bytes);
  if (b->shadow != 0) (void)TIERRT_CU(cuMemAddressFree, b->shadow, b->mapped);
  table->erase(b->va, b->mapped);
  (void)TIERRT_CU(cuMemAddressFree, b->va, b->mapped);
  recycle_block(b);
}

CUresult Impl::allocate(CUdeviceptr* out, std::size_t bytes, CUstream s, AllocFlags f) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  *out = 0;
  n_allocs.fetch_add(1, std::memory_order_relaxed);
  if (f.pass_through) {
    CUresult r = TIERRT_CU(cuMemAlloc, out, bytes);
    if (r == CUDA_SUCCESS) {
      std::lock_guard<std::mutex> g(mu);
      raw.insert(*out);
    }
    return r;
  }
  if (bytes < opt.min_bytes && bytes <= (std::size_t{1} << kSlabMaxShift))
    return alloc_small(out, bytes, s);
  return alloc_block(out, bytes, s, bytes >= opt.min_bytes);
}

CUresult Impl::alloc_block(CUdeviceptr* out, std::size_t bytes, CUstream s, bool spillable) {
  const std::size_t mapped = round_up(bytes, gran);
  // 1. The cache. Every access to a block is a recorded use (the runtime
  // records launches, copies and memsets that name it), so reuse on stream s
  // need only wait for uses on other streams: none when the block was used
  // and freed on s, the steady state of a training step.
  UseEvent* waits[kMaxUseSlots];
  int nwaits = 0;
  Block* b = nullptr;
  {
    std::lock_guard<std::mutex> g(mu);
    b = cache.take(mapped, s);
    if (b != nullptr) {
      b->size = bytes;
      b->spillable = spillable;
      b->cls = 0;
      b->captured = false;
      for (int i = 0; i < b->nuses; ++i)
        if (b->uses[i].stream != s) {
          b->uses[i].ev->refs.fetch_add(1, std::memory_order_relaxed);
          waits[nwaits++] = b->uses[i].ev;
        }
      set_state(b, State::Resident);
      class_bytes[0] += bytes;
      if (spillable) lru.push_back(*b);
    }
  }
  if (b != nullptr) {
    n_cache_hits.fetch_add(1, std::memory_order_relaxed);
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < nwaits; ++i) {
      CUresult w = TIERRT_CU(cuStreamWaitEvent, s, waits[i]->ev, 0u);
      if (w != CUDA_SUCCESS) r = w;
      unref(waits[i]);
    }
    if (r != CUDA_SUCCESS) {
      (void)free(b->va, s);
      return r;
    }
    *out = b->va;
    return CUDA_SUCCESS;
  }

  // 2. New memory: a spare chunk, or one from the driver.
  b = new_block();
  CUdeviceptr va = 0;
  CUresult r = TIERRT_CU(cuMemAddressReserve, &va, mapped, gran, CUdeviceptr{0}, 0ull);
  if (r != CUDA_SUCCESS) {
    recycle_block(b);
    return r;
  }
  CUmemGenericAllocationHandle h = 0;
  r = obtain_device_chunk(mapped, &h, true, nullptr);
  if (r != CUDA_SUCCESS) {
    (void)TIERRT_CU(cuMemAddressFree, va, mapped);
    recycle_block(b);
    return r;
  }
  r = map_rw(va, mapped, h, false);
  if (r == CUDA_SUCCESS && !table->insert(va, mapped, reinterpret_cast<std::uintptr_t>(b))) {
    (void)TIERRT_CU(cuMemUnmap, va, mapped);
    r = CUDA_ERROR_NOT_SUPPORTED;
  }
  if (r != CUDA_SUCCESS) {
    (void)TIERRT_CU(cuMemRelease, h);
    (void)TIERRT_CU(cuMemAddressFree, va, mapped);
    dev_budget.release(mapped);
    recycle_block(b);
    return r;
  }
  n_driver_allocs.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> g(mu);
    b->va = va;
    b->size = bytes;
    b->mapped = mapped;
    b->spillable = spillable;
    b->dev = h;
    set_state(b, State::Resident);
    class_bytes[0] += bytes;
    if (spillable) lru.push_back(*b);
  }
  *out = va;
  return CUDA_SUCCESS;
}

CUresult Impl::free(CUdeviceptr p, CUstream s) {
  if (p == 0) return CUDA_SUCCESS;
  const std::uintptr_t e = table->find(p);
  if (e == 0) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (raw.erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;
    }
    return TIERRT_CU(cuMemFree, p);
  }
  if (e & kSlabTag) {
    free_small(reinterpret_cast<Slab*>(e & ~kSlabTag), p);
    return CUDA_SUCCESS;
  }
  Block* b = reinterpret_cast<Block*>(e);
  std::vector<UseEvent*> drop;
  {
    std::unique_lock<std::mutex> l(mu);
    if (b->va != p) return CUDA_ERROR_INVALID_VALUE;
    for (;;) {
      const State st = settle_locked(b, l);
      if (st == State::Freed) return CUDA_ERROR_INVALID_VALUE;
      if (st == State::Fetching) {
        // The fetch's copy becomes a use: reuse waits for it.
        UseEvent* r = b->ready.exchange(nullptr);
        if (r != nullptr) {
          if (b->nuses < kMaxUseSlots) {
            b->uses[b->nuses++] = UseSlot{h2d, r};
          } else {
            l.unlock();
            (void)TIERRT_CU(cuEventSynchronize, r->ev);
            unref(r);
            l.lock();
          }
        }
        set_state(b, State::Resident);
        continue;
      }
      break;
    }
    class_bytes[b->cls] -= b->size;
    if (b->lru_hook.is_linked()) lru.erase(lru.iterator_to(*b));
    if (b->st() == State::Resident) {
      set_state(b, State::Freed);
      b->free_stream = s;
      cache.insert(b);
      return CUDA_SUCCESS;
    }
    // SPILLED: drop the host copy and the VA.
    set_state(b, State::Freed);
    clear_uses_locked(b, &drop);
  }
  for (UseEvent* u : drop) {
    (void)TIERRT_CU(cuEventSynchronize, u->ev);  // uses over the link (remap)
    unref(u);
  }
  destroy_block(b);
  return CUDA_SUCCESS;
}

CUresult Impl::alloc_small(CUdeviceptr* out, std::size_t bytes, CUstream s) {
  unsigned cls = std::max<unsigned>(kSlabMinShift, std::bit_width(bytes - 1));
  SlabPool* sp = nullptr;
  {
    std::lock_guard<std::mutex> g(slab_mu);
    for (auto& p : slab_pools[cls])
      if (p->stream == s) sp = p.get();
    if (sp == nullptr) {
      slab_pools[cls].push_back(std::make_unique<SlabPool>());
      sp = slab_pools[cls].back().get();
      sp->stream = s;
    }
    if (!sp->partial.empty()) {
      Slab& sl = sp->partial.front();
      const std::uint32_t idx = sl.free_slots.back();
      sl.free_slots.pop_back();
      if (sl.free_slots.empty()) sp->partial.pop_front();
      *out = sl.base + (CUdeviceptr{idx} << cls);
      return CUDA_SUCCESS;
    }
  }
  const std::size_t sbytes = round_up(std::size_t{2} << 20, gran);
  if (!reserve_device(sbytes, true, nullptr)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* sl = new Slab();
  sl->bytes = sbytes;
  sl->cls = cls;
  sl->stream = s;
  sl->capacity = static_cast<std::uint32_t>(sbytes >> cls);
  CUresult r = TIERRT_CU(cuMemAddressReserve, &sl->base, sbytes, gran, CUdeviceptr{0}, 0ull);
  if (r == CUDA_SUCCESS) {
    r = create_device_chunk(sbytes, &sl->handle, true, nullptr);
    if (r == CUDA_SUCCESS) {
      r = map_rw(sl->base, sbytes, sl->handle, false);
      if (r != CUDA_SUCCESS) (void)TIERRT_CU(cuMemRelease, sl->handle);
    }
    if (r == CUDA_SUCCESS &&
        !table->insert(sl->base, sbytes, reinterpret_cast<std::uintptr_t>(sl) | kSlabTag)) {
      (void)TIERRT_CU(cuMemUnmap, sl->base, sbytes);
      (void)TIERRT_CU(cuMemRelease, sl->handle);
      r = CUDA_ERROR_NOT_SUPPORTED;
    }
    if (r != CUDA_SUCCESS) (void)TIERRT_CU(cuMemAddressFree, sl->base, sbytes);
  }
  if (r != CUDA_SUCCESS) {
    dev_budget.release(sbytes);
    delete sl;
    return r;
  }
  n_driver_allocs.fetch_add(1, std::memory_order_relaxed);
  slab_bytes.fetch_add(sbytes, std::memory_order_relaxed);
  sl->free_slots.reserve(sl->capacity);
  for (std::uint32_t i = sl->capacity; i-- > 1;) sl->free_slots.push_back(i);
  std::lock_guard<std::mutex> g(slab_mu);
  all_slabs.push_back(sl);
  if (!sl->free_slots.empty()) sp->partial.push_back(*sl);
  *out = sl->base;  // slot 0
  return CUDA_SUCCESS;
}

void Impl::free_small(Slab* sl, CUdeviceptr p) {
  const CUdeviceptr off = p - sl->base;
  if ((off & ((CUdeviceptr{1} << sl->cls) - 1)) != 0) return;  // not a slot start
  std::lock_guard<std::mutex> g(slab_mu);
  SlabPool* sp = nullptr;
  for (auto& q : slab_pools[sl->cls])
    if (q->stream == sl->stream) sp = q.get();
  if (sl->free_slots.empty() && sp != nullptr) sp->partial.push_back(*sl);
  sl->free_slots.push_back(static_cast<std::uint32_t>(off >> sl->cls));
}

// ---- the public face ----

std::unique_ptr<Allocator> Allocator::create(const Options& opt, CUresult* err) {
  auto impl = std::make_unique<Impl>(opt);
  CUresult r = impl->init();
  if (err) *err = r;
  if (r != CUDA_SUCCESS) return nullptr;
  return std::unique_ptr<Allocator>(new Allocator(std::move(impl)));
}

Allocator::Allocator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Allocator::~Allocator() = default;

CUresult Allocator::allocate(CUdeviceptr* out, std::size_t bytes, CUstream stream,
                             AllocFlags flags) noexcept {
  try {
    return impl_->allocate(out, bytes, stream, flags);
  } catch (const drv::Error& e) {
    return e.code();
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
}

CUresult Allocator::free(CUdeviceptr ptr, CUstream stream) noexcept {
  try {
    return impl_->free(ptr, stream);
  } catch (const drv::Error& e) {
    return e.code();
  } catch (...) {
    return CUDA_ERROR_UNKNOWN;
  }
}

Block* Allocator::lookup(CUdeviceptr ptr) const noexcept {
  const std::uintptr_t e = impl_->table->find(ptr);
  return (e & kSlabTag) ? nullptr : reinterpret_cast<Block*>(e);
}

bool Allocator::owns(CUdeviceptr ptr) const noexcept { return impl_->table->find(ptr) != 0; }

std::uint64_t Allocator::trim(std::uint64_t bytes) noexcept {
  try {
    return impl_->trim(bytes);
  } catch (...) {
    return 0;
  }
}

void Allocator::set_class(Block* b, std::uint8_t cls) noexcept {
  std::lock_guard<std::mutex> g(impl_->mu);
  cls &= 7;
  if (b->st() != State::Freed) {
    impl_->class_bytes[b->cls] -= b->size;
    impl_->class_bytes[cls] += b->size;
  }
  b->cls = cls;
}

SpillMode Allocator::mode() const noexcept { return impl_->mode; }
std::size_t Allocator::granularity() const noexcept { return impl_->gran; }
const Options& Allocator::options() const noexcept { return impl_->opt; }

}  // namespace tierrt::alloc
