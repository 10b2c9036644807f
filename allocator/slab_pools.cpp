#include "slab_pools.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdint>
#include <iterator>

#include "driver/driver.h"

namespace tierrt::alloc {

namespace {

constexpr std::size_t kSlabBytes = std::size_t{2} << 20;

bool test_bit(const std::vector<std::uint64_t>& bits, std::uint32_t i) noexcept {
  return ((bits[i >> 6] >> (i & 63)) & 1) != 0;
}
void set_bit(std::vector<std::uint64_t>& bits, std::uint32_t i, bool on) noexcept {
  const std::uint64_t m = std::uint64_t{1} << (i & 63);
  bits[i >> 6] = on ? bits[i >> 6] | m : bits[i >> 6] & ~m;
}

}  // namespace

SlabPools::~SlabPools() {
  for (Pool& p : pools_) {
    for (Pending& e : p.pending) forget_pending(e);
    p.pending.clear();
    p.partial.clear();
    p.slabs.clear_and_dispose([&](Slab* sl) {
      (void)uses_.forget(&sl->uses, /*synchronize=*/false);
      arena_.destroy_range(sl->range);
    });
  }
}

CUdeviceptr SlabPools::take_free_locked(Pool& p) noexcept {
  if (p.partial.empty()) return 0;
  Slab& sl = p.partial.front();
  const std::uint32_t idx = sl.free_slots.back();
  sl.free_slots.pop_back();
  if (sl.free_slots.empty()) p.partial.pop_front();
  set_bit(sl.taken, idx, true);
  ++sl.handed_out;
  return sl.range.va + (CUdeviceptr{idx} << sl.size_shift);
}

void SlabPools::give_free_locked(Pool& p, Slab* sl, std::uint32_t idx) noexcept {
  if (sl->free_slots.empty()) p.partial.push_back(*sl);
  sl->free_slots.push_back(idx);
}

void SlabPools::forget_pending(Pending& e) noexcept {
  for (int i = 0; i < e.nuses; ++i) uses_.unref(e.uses[i].ev);
  e.nuses = 0;
}

CUresult SlabPools::allocate(CUdeviceptr* out, std::size_t bytes, CUstream s) noexcept {
  const unsigned shift = std::max<unsigned>(kMinShift, std::bit_width(bytes - 1));
  for (;;) {
    if (take_freed(shift, s, out)) return CUDA_SUCCESS;
    {
      // One new slab per size at a time: threads that found none wait for
      // it rather than each making their own.
      std::unique_lock<RankedMutex> l(mu_);
      Pool& p = pools_[shift];
      if (p.growing) {
        grown_.wait(l, [&] { return !p.growing; });
        continue;
      }
      if (!p.partial.empty()) continue;  // a slot was freed meanwhile
      p.growing = true;
    }
    Slab* sl = nullptr;
    const CUresult r = new_slab(shift, &sl);
    {
      std::lock_guard<RankedMutex> g(mu_);
      Pool& p = pools_[shift];
      p.growing = false;
      if (r == CUDA_SUCCESS) *out = sl->range.va;  // slot 0, handed out by new_slab
    }
    grown_.notify_all();
    return r;
  }
}

bool SlabPools::take_freed(unsigned shift, CUstream s, CUdeviceptr* out) noexcept {
  const bool ordered = stream_ordered(s);
  for (bool polled = false;; polled = true) {
    Pending reused;
    {
      std::lock_guard<RankedMutex> g(mu_);
      Pool& p = pools_[shift];
      if (const CUdeviceptr v = take_free_locked(p)) {
        *out = v;
        return true;
      }
      if (ordered && !p.pending.empty()) {
        // Stream-ordered: a freed slot whose uses `s` waits for. One freed
        // on `s` first (its uses there precede this allocation), else the
        // oldest.
        auto it = p.pending.begin();
        for (auto j = p.pending.rbegin(); j != p.pending.rend(); ++j)
          if (j->freed_on == s) {
            it = std::prev(j.base());
            break;
          }
        reused = *it;
        p.pending.erase(it);
        set_bit(reused.slab->taken, reused.idx, true);
        ++reused.slab->handed_out;
        --reused.slab->pending;
      }
    }
    if (reused.slab != nullptr) {
      if (wait_for_reuse(reused, s) != CUDA_SUCCESS) {
        // Its uses cannot be waited for now: the slot stays pending and the
        // allocation takes a slot of a new slab.
        std::lock_guard<RankedMutex> g(mu_);
        set_bit(reused.slab->taken, reused.idx, false);
        --reused.slab->handed_out;
        ++reused.slab->pending;
        pools_[shift].pending.push_back(reused);
        return false;
      }
      forget_pending(reused);
      *out = reused.slab->range.va + (CUdeviceptr{reused.idx} << shift);
      return true;
    }
    if (polled) return false;
    retire(shift, kPollBatch, /*wait=*/false);
  }
}

CUresult SlabPools::wait_for_reuse(const Pending& e, CUstream s) noexcept {
  CUresult r = CUDA_SUCCESS;
  for (int i = 0; i < e.nuses && r == CUDA_SUCCESS; ++i) {
    const UseSlot& u = e.uses[i];
    if (u.stream == s) continue;  // ordered before this allocation already
    r = UseTracker::unrecorded(u.ev) ? UseTracker::wait_host(u) : TIERRT_CU(cuStreamWaitEvent, s, u.ev->ev, 0u);
    if (r != CUDA_SUCCESS) r = UseTracker::wait_host(u);
  }
  return r;
}

void SlabPools::retire(unsigned shift, std::size_t most, bool wait) noexcept {
  std::vector<Pending> batch;
  {
    std::lock_guard<RankedMutex> g(mu_);
    Pool& p = pools_[shift];
    const std::size_t n = std::min(most, p.pending.size());
    batch.assign(p.pending.begin(), p.pending.begin() + static_cast<std::ptrdiff_t>(n));
    p.pending.erase(p.pending.begin(), p.pending.begin() + static_cast<std::ptrdiff_t>(n));
  }
  if (batch.empty()) return;
  std::vector<bool> done(batch.size(), true);
  for (std::size_t i = 0; i < batch.size(); ++i)
    for (int u = 0; u < batch[i].nuses && done[i]; ++u) {
      const UseSlot& use = batch[i].uses[u];
      done[i] = wait ? UseTracker::wait_host(use) == CUDA_SUCCESS : UseTracker::completed(use);
    }
  {
    std::lock_guard<RankedMutex> g(mu_);
    Pool& p = pools_[shift];
    for (std::size_t i = batch.size(); i-- > 0;) {
      if (!done[i]) {
        p.pending.push_front(batch[i]);  // keeps the oldest first
        continue;
      }
      give_free_locked(p, batch[i].slab, batch[i].idx);
      --batch[i].slab->pending;
    }
  }
  for (std::size_t i = 0; i < batch.size(); ++i)
    if (done[i]) forget_pending(batch[i]);
}

CUresult SlabPools::free(Slab* sl, CUdeviceptr ptr, CUstream s) noexcept {
  unsigned shift = 0;
  bool emptied = false;
  {
    std::lock_guard<RankedMutex> g(mu_);
    if (!sl->live || ptr < sl->range.va || ptr - sl->range.va >= sl->range.bytes) return CUDA_ERROR_INVALID_VALUE;
    shift = sl->size_shift;
    const CUdeviceptr off = ptr - sl->range.va;
    const auto idx = static_cast<std::uint32_t>(off >> shift);
    // An interior pointer, or a slot not handed out (a double free).
    if ((off & ((CUdeviceptr{1} << shift) - 1)) != 0 || !test_bit(sl->taken, idx)) return CUDA_ERROR_INVALID_VALUE;
    set_bit(sl->taken, idx, false);
    --sl->handed_out;
    Pool& p = pools_[shift];
    Pending e;
    e.slab = sl;
    e.idx = idx;
    e.freed_on = s;
    e.nuses = uses_.take_refs(&sl->uses, e.uses);
    if (e.nuses == 0) {
      give_free_locked(p, sl, idx);
    } else {
      p.pending.push_back(e);
      ++sl->pending;
    }
    emptied = sl->empty();
  }
  if (emptied) (void)release(shift, 1, /*wait=*/false);
  return CUDA_SUCCESS;
}

std::uint64_t SlabPools::release_empty(bool wait) noexcept {
  std::uint64_t sum = 0;
  for (unsigned shift = kMinShift; shift <= kMaxShift; ++shift) {
    retire(shift, SIZE_MAX, wait);
    sum += release(shift, 0, wait);
  }
  return sum;
}

std::uint64_t SlabPools::release(unsigned shift, std::size_t keep, bool wait) noexcept {
  struct Seen {
    Slab* slab;
    std::uint64_t generation;
  };
  std::vector<Seen> empty;
  {
    std::lock_guard<RankedMutex> g(mu_);
    for (Slab& sl : pools_[shift].slabs)
      if (sl.empty()) empty.push_back({&sl, sl.generation});
  }
  if (empty.size() <= keep) return 0;
  // Uses recorded on a slab after its slots were freed (stale pointers)
  // still keep it: only an idle one goes.
  for (const Seen& e : empty) {
    if (wait) (void)uses_.forget(&e.slab->uses, /*synchronize=*/true);
    else (void)uses_.retire_completed(&e.slab->uses);
  }
  std::vector<Slab*> gone;
  {
    std::lock_guard<RankedMutex> g(mu_);
    Pool& p = pools_[shift];
    std::size_t kept = 0;
    for (const auto& [sl, generation] : empty) {
      // Another thread may have released it meanwhile, and a new slab may
      // have taken the same object since.
      if (!sl->live || sl->generation != generation || !sl->empty() || !uses_.idle(&sl->uses)) continue;
      assert(sl->size_shift == shift && sl->hook.is_linked());
      if (kept < keep) {
        ++kept;
        continue;
      }
      // Against a launch pinning its use record: publish, then look at pins.
      sl->uses.state.store(State::Freed, std::memory_order_seq_cst);
      if (sl->uses.pins.load(std::memory_order_seq_cst) != 0) {
        sl->uses.state.store(State::Resident, std::memory_order_seq_cst);
        ++kept;
        continue;
      }
      p.slabs.erase(p.slabs.iterator_to(*sl));
      if (sl->partial_hook.is_linked()) p.partial.erase(p.partial.iterator_to(*sl));
      sl->live = false;
      gone.push_back(sl);
    }
  }
  std::uint64_t sum = 0;
  for (Slab* sl : gone) {
    arena_.destroy_range(sl->range);
    sum += sl->range.bytes;
  }
  bytes_.fetch_sub(sum, std::memory_order_relaxed);
  std::lock_guard<RankedMutex> g(mu_);
  spare_objects_.insert(spare_objects_.end(), gone.begin(), gone.end());
  return sum;
}

CUresult SlabPools::new_slab(unsigned shift, Slab** out) noexcept {
  Slab* sl = nullptr;
  {
    std::lock_guard<RankedMutex> g(mu_);
    if (!spare_objects_.empty()) {
      sl = spare_objects_.back();
      spare_objects_.pop_back();
    } else {
      sl = &storage_.emplace_back();
      sl->uses.slab = true;
      sl->uses.spillable = false;
    }
  }
  DeviceRange range;
  const std::size_t bytes = arena_.round_up(kSlabBytes);
  const CUresult r = arena_.create_range(bytes, reinterpret_cast<std::uintptr_t>(sl) | kTag, Claimant{}, &range);
  std::lock_guard<RankedMutex> g(mu_);
  if (r != CUDA_SUCCESS) {
    spare_objects_.push_back(sl);
    return r;
  }
  sl->range = range;
  sl->size_shift = shift;
  sl->live = true;
  sl->handed_out = sl->pending = 0;
  const auto capacity = static_cast<std::uint32_t>(bytes >> shift);
  sl->taken.assign((capacity + 63) / 64, 0);
  sl->free_slots.clear();
  sl->free_slots.reserve(capacity);
  for (std::uint32_t i = capacity; i-- > 1;) sl->free_slots.push_back(i);
  sl->uses.state.store(State::Resident, std::memory_order_seq_cst);
  ++sl->generation;
  // Live and in its pool in one step, with slot 0 taken by the caller, so
  // that no release sees it live and empty before it is anyone's.
  Pool& p = pools_[shift];
  p.slabs.push_back(*sl);
  set_bit(sl->taken, 0, true);
  sl->handed_out = 1;
  if (!sl->free_slots.empty()) p.partial.push_back(*sl);
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  made_.fetch_add(1, std::memory_order_relaxed);
  *out = sl;
  return CUDA_SUCCESS;
}

}  // namespace tierrt::alloc
