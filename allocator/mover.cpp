// The block state machine and the mover, in one file: every change of
// Block::state happens in set_state() below, and every spill and fetch is
// enqueued and finalised here, on the D2H (low priority) and H2D streams.
//
// RESIDENT --spill--> SPILLING --copy done, no use in flight--> SPILLED
// SPILLED --prefetch or demand--> FETCHING --copy done--> RESIDENT
// FETCHING --no device memory / driver error--> SPILLED
// SPILLING --used or freed before the copy completed--> RESIDENT (aborted)
// RESIDENT --free--> FREED (cached) --reuse--> RESIDENT;  SPILLED --free--> FREED
//
// Rules kept here:
// - a spill's copy waits (cuStreamWaitEvent) on the block's use events; the
//   device chunk is unmapped and released only once that copy completed,
//   which implies every earlier use completed; a use after the spill started
//   aborts the spill instead;
// - the VA is never left unmapped while work may be enqueued against it:
//   launches pin blocks (ensure_resident .. release) and a remap waits for
//   pins to drop and blocks new ones (Block::remapping);
// - a fetch hands back its event; consumers wait on it with cuStreamWaitEvent.
#include <algorithm>
#include <chrono>

#include "allocator/impl.h"

namespace tierrt::alloc {

namespace {

std::uint64_t steady_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// Block::needed_since for a fetch started on demand: nobody waits "late" on it.
constexpr std::uint64_t kDemandFetch = 1;

}  // namespace

const char* state_name(State s) noexcept {
  switch (s) {
    case State::Resident: return "RESIDENT";
    case State::Spilling: return "SPILLING";
    case State::Spilled: return "SPILLED";
    case State::Fetching: return "FETCHING";
    case State::Freed: return "FREED";
  }
  return "?";
}

bool transition_allowed(State from, State to) noexcept {
  switch (from) {
    case State::Resident: return to == State::Spilling || to == State::Freed;
    case State::Spilling: return to == State::Spilled || to == State::Resident;
    case State::Spilled: return to == State::Fetching || to == State::Freed;
    case State::Fetching: return to == State::Resident || to == State::Spilled;
    case State::Freed: return to == State::Resident;
  }
  return false;
}

void Impl::set_state(Block* b, State to) {
  const State from = b->st();
  if (!transition_allowed(from, to)) std::abort();  // a bug in this file
  // A block leaving FREED for the first time (brand new) was never counted.
  if (from != State::Freed || b->counted_freed) {
    --st_blocks[static_cast<int>(from)];
    st_bytes[static_cast<int>(from)] -= b->size;
  }
  b->counted_freed = to == State::Freed;
  ++st_blocks[static_cast<int>(to)];
  st_bytes[static_cast<int>(to)] += b->size;
  b->state.store(to, std::memory_order_seq_cst);
}

UseEvent* Impl::acquire_event() {
  {
    std::lock_guard<std::mutex> g(ev_mu);
    if (ev_free != nullptr) {
      UseEvent* e = ev_free;
      ev_free = e->next_free;
      e->refs.store(1, std::memory_order_relaxed);
      return e;
    }
  }
  CUevent ev = nullptr;
  if (TIERRT_CU(cuEventCreate, &ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
  std::lock_guard<std::mutex> g(ev_mu);
  ev_storage.emplace_back();
  UseEvent* e = &ev_storage.back();
  e->ev = ev;
  e->refs.store(1, std::memory_order_relaxed);
  return e;
}

void Impl::unref(UseEvent* e) {
  if (e == nullptr) return;
  if (e->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard<std::mutex> g(ev_mu);
    e->next_free = ev_free;
    ev_free = e;
  }
}

void Impl::acquire_timing(MoveOp* op) {
  CUevent pair[2] = {nullptr, nullptr};
  {
    std::lock_guard<std::mutex> g(ev_mu);
    for (CUevent& e : pair)
      if (!timing_free.empty()) {
        e = timing_free.back();
        timing_free.pop_back();
      }
  }
  for (CUevent& e : pair)
    if (e == nullptr && TIERRT_CU(cuEventCreate, &e, CU_EVENT_DEFAULT) != CUDA_SUCCESS) e = nullptr;
  op->copy_begin = pair[0];
  op->copy_end = pair[1];
  if (op->copy_begin == nullptr || op->copy_end == nullptr) release_timing(op);  // measuring is optional
}

void Impl::release_timing(MoveOp* op) {
  std::lock_guard<std::mutex> g(ev_mu);
  for (CUevent* e : {&op->copy_begin, &op->copy_end})
    if (*e != nullptr) {
      timing_free.push_back(*e);
      *e = nullptr;
    }
}

// Around the copy on `s`: a failed record only loses the measurement.
static void time_copy_edge(Impl& impl, MoveOp* op, CUevent e, CUstream s) {
  if (e != nullptr && TIERRT_CU(cuEventRecord, e, s) != CUDA_SUCCESS) impl.release_timing(op);
}

void Impl::report_copy(const MoveOp& op) {
  MoveObserver* o = observer.load(std::memory_order_acquire);
  if (o == nullptr || op.copy_begin == nullptr || op.copy_end == nullptr) return;
  float ms = 0;
  if (TIERRT_CU(cuEventElapsedTime, &ms, op.copy_begin, op.copy_end) != CUDA_SUCCESS || !(ms > 0)) return;
  o->copy_done(op.kind == MoveOp::Spill ? MoveObserver::Direction::ToHost : MoveObserver::Direction::ToDevice,
               op.b->size, static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6));
}

void Impl::clear_uses_locked(Block* b, std::vector<UseEvent*>* drop) {
  for (int i = 0; i < b->nuses; ++i) drop->push_back(b->uses[i].ev);
  b->nuses = 0;
}

State Impl::settle_locked(Block* b, std::unique_lock<std::mutex>& l) {
  for (;;) {
    const State st = b->st();
    if (st == State::Freed || b->va == 0) return State::Freed;
    if (b->remapping) {
      cv.wait(l);
      continue;
    }
    if (st == State::Spilling) {
      abort_spill_locked(b);
      continue;
    }
    return st;
  }
}

bool Impl::abort_spill_locked(Block* b) {
  if (b->st() != State::Spilling || b->remapping) return false;
  ++b->gen;  // the pending copy is discarded when it completes
  ++n_aborted;
  set_state(b, State::Resident);
  if (b->spillable && !b->lru_hook.is_linked()) lru.push_back(*b);
  cv.notify_all();
  return true;
}

SpillResult Impl::spill(Block* b) {
  UseEvent* waits[kMaxUseSlots];
  CUstream wait_streams[kMaxUseSlots];
  int nwaits = 0;
  std::uint32_t gen = 0;
  std::uint64_t host_bytes = 0;
  {
    std::lock_guard<std::mutex> g(mu);
    const State st = b->st();
    if (!b->spillable || st == State::Freed || b->va == 0) return SpillResult::NotSpillable;
    if (st == State::Fetching) return SpillResult::Busy;
    if (st != State::Resident) return SpillResult::AlreadyMoving;
    if (b->captured || b->ops_pending != 0 || b->ready.load() != nullptr) return SpillResult::Busy;
    host_bytes = mode == SpillMode::Remap ? b->mapped : b->size;
    if (!host_budget.try_reserve(host_bytes)) {
      ++n_host_full;
      return SpillResult::HostFull;
    }
    // Against ensure_resident's fast path: publish SPILLING, then look at pins.
    set_state(b, State::Spilling);
    if (b->pins.load(std::memory_order_seq_cst) != 0) {
      set_state(b, State::Resident);
      host_budget.release(host_bytes);
      return SpillResult::Busy;
    }
    gen = ++b->gen;
    ++b->ops_pending;
    ++spills_in_flight;
    ++ops_in_flight;
    if (b->lru_hook.is_linked()) lru.erase(lru.iterator_to(*b));
    for (int i = 0; i < b->nuses; ++i) {
      b->uses[i].ev->refs.fetch_add(1, std::memory_order_relaxed);
      waits[nwaits] = b->uses[i].ev;
      wait_streams[nwaits++] = b->uses[i].stream;
    }
  }

  auto* op = new MoveOp{MoveOp::Spill, b, gen, nullptr};
  op->host_bytes = host_bytes;
  CUresult r = CUDA_SUCCESS;
  SpillResult fail = SpillResult::Failed;
  // Nothing moves while a stream that used the block is capturing.
  for (int i = 0; i < nwaits && r == CUDA_SUCCESS; ++i) {
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (TIERRT_CU(cuStreamIsCapturing, wait_streams[i], &cs) == CUDA_SUCCESS &&
        cs != CU_STREAM_CAPTURE_STATUS_NONE) {
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      fail = SpillResult::Busy;
    }
  }
  if (r == CUDA_SUCCESS && mode == SpillMode::Remap) {
    if (b->shadow == 0) {
      CUdeviceptr s = 0;
      r = TIERRT_CU(cuMemAddressReserve, &s, b->mapped, gran, CUdeviceptr{0}, 0ull);
      if (r == CUDA_SUCCESS) b->shadow = s;  // only this thread touches it (ops_pending)
    }
    if (r == CUDA_SUCCESS) r = host.take_host_chunk(b->mapped, &op->host);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) fail = SpillResult::HostFull;
    if (r == CUDA_SUCCESS) {
      r = map_rw(b->shadow, b->mapped, op->host, true);
      if (r != CUDA_SUCCESS) {
        host.give_host_chunk(op->host, b->mapped);
        op->host = 0;
      }
    }
  } else if (r == CUDA_SUCCESS) {
    op->host_buf = host.alloc_pinned(b->size);
    if (op->host_buf == nullptr) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
      fail = SpillResult::HostFull;
    }
  }
  for (int i = 0; i < nwaits; ++i) {
    if (r == CUDA_SUCCESS) r = TIERRT_CU(cuStreamWaitEvent, d2h, waits[i]->ev, 0u);
    unref(waits[i]);
  }
  if (r == CUDA_SUCCESS) {
    acquire_timing(op);
    time_copy_edge(*this, op, op->copy_begin, d2h);
    r = mode == SpillMode::Remap
            ? TIERRT_CU(cuMemcpyAsync, b->shadow, b->va, b->size, d2h)
            : TIERRT_CU(cuMemcpyDtoHAsync, op->host_buf, b->va, b->size, d2h);
    if (r == CUDA_SUCCESS) time_copy_edge(*this, op, op->copy_end, d2h);
  }
  if (r == CUDA_SUCCESS) {
    op->ev = acquire_event();
    if (op->ev == nullptr) r = CUDA_ERROR_OUT_OF_MEMORY;
    else r = TIERRT_CU(cuEventRecord, op->ev->ev, d2h);
  }
  if (r != CUDA_SUCCESS) {
    // Undo: the block stays resident. A copy may have been enqueued: wait.
    (void)TIERRT_CU(cuStreamSynchronize, d2h);
    if (op->host != 0) {
      (void)TIERRT_CU(cuMemUnmap, b->shadow, b->mapped);
      host.give_host_chunk(op->host, b->mapped);
    }
    if (op->host_buf != nullptr) host.free_pinned(op->host_buf);
    unref(op->ev);
    release_timing(op);
    host_budget.release(host_bytes);
    delete op;
    std::lock_guard<std::mutex> g(mu);
    if (fail == SpillResult::HostFull) ++n_host_full;
    if (b->st() == State::Spilling && b->gen == gen) {
      set_state(b, State::Resident);
      if (!b->lru_hook.is_linked()) lru.push_back(*b);
    }
    --b->ops_pending;
    --spills_in_flight;
    --ops_in_flight;
    cv.notify_all();
    return fail;
  }
  {
    std::lock_guard<std::mutex> g(mu);
    ++n_spills;
    ops.push_back(op);
  }
  mover_cv.notify_one();
  return SpillResult::Started;
}

CUresult Impl::fetch(Block* b, CUstream consumer, bool demand) {
  UseEvent* wait_for = nullptr;
  std::vector<UseEvent*> uses;
  MoveOp* op = nullptr;
  {
    std::unique_lock<std::mutex> l(mu);
    for (;;) {
      const State st = settle_locked(b, l);
      if (st == State::Freed) return CUDA_ERROR_INVALID_VALUE;
      if (st == State::Resident || st == State::Fetching) {
        wait_for = b->ready.load();
        if (wait_for) wait_for->refs.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      // SPILLED: start the fetch.
      set_state(b, State::Fetching);
      b->remapping = true;
      op = new MoveOp{MoveOp::Fetch, b, b->gen, nullptr};
      op->host = b->host;
      op->host_buf = b->host_buf;
      op->host_bytes = b->host_bytes;
      clear_uses_locked(b, &uses);
      ++b->ops_pending;
      ++ops_in_flight;
      if (demand) ++n_demand;
      b->needed_since.store(demand ? kDemandFetch : 0, std::memory_order_relaxed);
      break;
    }
  }
  if (op != nullptr && demand)
    if (MoveObserver* o = observer.load(std::memory_order_acquire)) o->demand_fetch(*b);
  if (op == nullptr) {
    CUresult r = CUDA_SUCCESS;
    if (wait_for != nullptr) {
      if (consumer != nullptr) r = TIERRT_CU(cuStreamWaitEvent, consumer, wait_for->ev, 0u);
      unref(wait_for);
    }
    return r;
  }

  // Uses of a spilled block (remap: reads over the link) must finish before
  // the VA is remapped.
  for (UseEvent* u : uses) {
    (void)TIERRT_CU(cuEventSynchronize, u->ev);
    unref(u);
  }
  CUmemGenericAllocationHandle d = 0;
  CUresult r = obtain_device_chunk(b->mapped, &d, demand, b);
  if (r == CUDA_SUCCESS) {
    if (mode == SpillMode::Remap) {
      r = TIERRT_CU(cuMemUnmap, b->va, b->mapped);
      if (r == CUDA_SUCCESS) {
        r = map_rw(b->va, b->mapped, d, false);
        if (r != CUDA_SUCCESS) {
          // Put the host chunk back where it was.
          (void)map_rw(b->va, b->mapped, op->host, true);
        }
      }
      if (r == CUDA_SUCCESS) {
        acquire_timing(op);
        time_copy_edge(*this, op, op->copy_begin, h2d);
        r = TIERRT_CU(cuMemcpyAsync, b->va, b->shadow, b->size, h2d);
      }
    } else {
      r = map_rw(b->va, b->mapped, d, false);
      if (r == CUDA_SUCCESS) {
        acquire_timing(op);
        time_copy_edge(*this, op, op->copy_begin, h2d);
        r = TIERRT_CU(cuMemcpyHtoDAsync, b->va, op->host_buf, b->size, h2d);
      }
    }
    if (r == CUDA_SUCCESS) time_copy_edge(*this, op, op->copy_end, h2d);
    if (r == CUDA_SUCCESS) {
      op->ev = acquire_event();
      r = op->ev ? TIERRT_CU(cuEventRecord, op->ev->ev, h2d) : CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r != CUDA_SUCCESS) {
      (void)TIERRT_CU(cuStreamSynchronize, h2d);
      if (mode == SpillMode::Copy) (void)TIERRT_CU(cuMemUnmap, b->va, b->mapped);
      (void)TIERRT_CU(cuMemRelease, d);
      dev_budget.release(b->mapped);
      d = 0;
    }
  }
  if (r != CUDA_SUCCESS) {
    unref(op->ev);
    release_timing(op);
    delete op;
    std::lock_guard<std::mutex> g(mu);
    b->remapping = false;
    set_state(b, State::Spilled);  // the fetch failed: still spilled
    --b->ops_pending;
    --ops_in_flight;
    cv.notify_all();
    return r;
  }
  UseEvent* ev = op->ev;  // op belongs to the mover once queued
  ev->refs.fetch_add(2, std::memory_order_relaxed);  // the block's and this call's
  {
    std::lock_guard<std::mutex> g(mu);
    b->dev = d;
    b->host = 0;
    b->host_buf = nullptr;
    b->host_bytes = 0;
    b->ready.store(ev, std::memory_order_release);
    b->remapping = false;
    ++n_fetches;
    n_bytes_fetched += b->size;
    if (b->spillable && !b->lru_hook.is_linked()) lru.push_back(*b);
    ops.push_back(op);
  }
  mover_cv.notify_one();
  cv.notify_all();  // the remap is done
  CUresult w = CUDA_SUCCESS;
  if (consumer != nullptr) w = TIERRT_CU(cuStreamWaitEvent, consumer, ev->ev, 0u);
  unref(ev);
  return w;
}

void Impl::finalize(MoveOp* op) {
  Block* b = op->b;
  (void)TIERRT_CU(cuEventSynchronize, op->ev->ev);
  // An aborted spill's copy still ran: it measures the link all the same.
  report_copy(*op);
  release_timing(op);
  if (op->kind == MoveOp::Fetch) {
    const std::uint64_t since = b->needed_since.exchange(0, std::memory_order_relaxed);
    if (since > kDemandFetch)
      if (MoveObserver* o = observer.load(std::memory_order_acquire)) {
        const std::uint64_t now = steady_ns();
        o->late_fetch(*b, now > since ? now - since : 0);
      }
  }
  if (op->kind == MoveOp::Spill) {
    bool keep = false;
    {
      std::unique_lock<std::mutex> l(mu);
      if (b->st() == State::Spilling && b->gen == op->gen) {
        keep = true;
        b->remapping = true;  // no pins can exist: a use would have aborted
      }
    }
    if (keep) {
      // Every use before the spill completed before the copy did.
      CUmemGenericAllocationHandle d = b->dev;
      CUresult r = TIERRT_CU(cuMemUnmap, b->va, b->mapped);
      if (r == CUDA_SUCCESS && mode == SpillMode::Remap) r = map_rw(b->va, b->mapped, op->host, true);
      if (r == CUDA_SUCCESS) {
        give_device_chunk(d, b->mapped);
      } else {
        (void)map_rw(b->va, b->mapped, d, false);  // stay resident
      }
      std::lock_guard<std::mutex> g(mu);
      b->remapping = false;
      if (r == CUDA_SUCCESS) {
        b->dev = 0;
        b->host = op->host;
        b->host_buf = op->host_buf;
        b->host_bytes = op->host_bytes;
        n_bytes_spilled += b->size;
        set_state(b, State::Spilled);
        op->host = 0;
        op->host_buf = nullptr;
        op->host_bytes = 0;
      } else {
        ++b->gen;
        set_state(b, State::Resident);
        if (!b->lru_hook.is_linked()) lru.push_back(*b);
      }
    }
  } else {
    std::lock_guard<std::mutex> g(mu);
    UseEvent* r = b->ready.load();
    if (r == op->ev) {
      b->ready.store(nullptr, std::memory_order_release);
      set_state(b, State::Resident);
      unref(r);
    }
  }
  // Host resources the block no longer needs: an aborted spill's copy, or a
  // fetched block's host chunk / pinned buffer.
  if (op->host != 0) {
    (void)TIERRT_CU(cuMemUnmap, b->shadow, b->mapped);
    host.give_host_chunk(op->host, b->mapped);
  }
  if (op->host_buf != nullptr) host.free_pinned(op->host_buf);
  if (op->host_bytes) host_budget.release(op->host_bytes);
  unref(op->ev);
  {
    std::lock_guard<std::mutex> g(mu);
    --b->ops_pending;
    if (op->kind == MoveOp::Spill) --spills_in_flight;
    --ops_in_flight;
  }
  cv.notify_all();
  delete op;
}

void Impl::mover_loop() {
  (void)TIERRT_CU(cuCtxSetCurrent, ctx);
  std::unique_lock<std::mutex> l(mu);
  for (;;) {
    mover_cv.wait(l, [&] { return stopping || !ops.empty(); });
    if (ops.empty()) {
      if (stopping) return;
      continue;
    }
    MoveOp* op = ops.front();
    ops.pop_front();
    l.unlock();
    finalize(op);
    l.lock();
  }
}

void Impl::drain() {
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return ops_in_flight == 0; });
}

CUresult Impl::ensure_resident(std::span<Block* const> blocks, CUstream s) {
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    Block* b = blocks[i];
    // Fast path: resident, no fetch pending. Pin first, then look (pairs
    // with spill(): publish SPILLING, then look at pins).
    b->pins.fetch_add(1, std::memory_order_seq_cst);
    if (b->state.load(std::memory_order_seq_cst) == State::Resident &&
        b->ready.load(std::memory_order_acquire) == nullptr)
      continue;
    b->pins.fetch_sub(1, std::memory_order_seq_cst);
    UseEvent* wait_for = nullptr;
    CUresult err = CUDA_SUCCESS;
    {
      std::unique_lock<std::mutex> l(mu);
      for (;;) {
        const State st = settle_locked(b, l);
        if (st == State::Freed) {
          err = CUDA_ERROR_INVALID_VALUE;
          break;
        }
        if (st == State::Resident || st == State::Fetching) {
          b->pins.fetch_add(1, std::memory_order_seq_cst);
          wait_for = b->ready.load();
          if (wait_for) wait_for->refs.fetch_add(1, std::memory_order_relaxed);
          break;
        }
        // SPILLED: demand fetch (without the lock), then look again.
        l.unlock();
        CUresult r = fetch(b, nullptr, true);
        l.lock();
        if (r != CUDA_SUCCESS && b->st() == State::Spilled) {
          if (mode == SpillMode::Remap) {
            // Still correct over the link, only slower.
            b->pins.fetch_add(1, std::memory_order_seq_cst);
            break;
          }
          err = r;
          break;
        }
      }
    }
    if (wait_for != nullptr) {
      // A prefetch still under way when the launch needs it is late: the
      // mover reports by how much once it completes.
      if (b->needed_since.load(std::memory_order_relaxed) == 0 &&
          observer.load(std::memory_order_relaxed) != nullptr &&
          TIERRT_CU(cuEventQuery, wait_for->ev) == CUDA_ERROR_NOT_READY) {
        std::uint64_t none = 0;
        b->needed_since.compare_exchange_strong(none, steady_ns(), std::memory_order_relaxed);
      }
      CUresult r = TIERRT_CU(cuStreamWaitEvent, s, wait_for->ev, 0u);
      unref(wait_for);
      if (r != CUDA_SUCCESS) {
        b->pins.fetch_sub(1);
        err = r;
      }
    }
    if (err != CUDA_SUCCESS) {
      release(blocks.first(i));
      return err;
    }
  }
  return CUDA_SUCCESS;
}

void Impl::release(std::span<Block* const> blocks) {
  for (Block* b : blocks) b->pins.fetch_sub(1, std::memory_order_seq_cst);
}

CUresult Impl::record_use(std::span<Block* const> blocks, CUstream s, bool capturing) {
  if (capturing) {
    std::lock_guard<std::mutex> g(mu);
    for (Block* b : blocks) b->captured = true;
    return CUDA_SUCCESS;
  }
  // Blocks whose slots are full hand their oldest event to this stream first
  // (the new event then implies it).
  for (;;) {
    UseEvent* chain[16];
    int nchain = 0;
    {
      std::lock_guard<std::mutex> g(mu);
      for (Block* b : blocks) {
        bool has = false;
        for (int i = 0; i < b->nuses; ++i) has |= b->uses[i].stream == s;
        if (!has && b->nuses == kMaxUseSlots && nchain < 16) {
          b->uses[0].ev->refs.fetch_add(1, std::memory_order_relaxed);
          chain[nchain++] = b->uses[0].ev;
        }
      }
    }
    if (nchain == 0) break;
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < nchain; ++i) {
      if (r == CUDA_SUCCESS) r = TIERRT_CU(cuStreamWaitEvent, s, chain[i]->ev, 0u);
      unref(chain[i]);
    }
    if (r != CUDA_SUCCESS) return r;
    // Now drop those slots in favour of the event recorded below.
    UseEvent* e = acquire_event();
    if (e == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
    r = TIERRT_CU(cuEventRecord, e->ev, s);
    if (r != CUDA_SUCCESS) {
      unref(e);
      return r;
    }
    std::vector<UseEvent*> drop;
    {
      std::lock_guard<std::mutex> g(mu);
      for (Block* b : blocks)
        if (b->nuses == kMaxUseSlots) {
          drop.push_back(b->uses[0].ev);
          e->refs.fetch_add(1, std::memory_order_relaxed);
          b->uses[0] = UseSlot{s, e};
        }
    }
    unref(e);
    for (UseEvent* u : drop) unref(u);
  }
  UseEvent* e = acquire_event();
  if (e == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = TIERRT_CU(cuEventRecord, e->ev, s);
  if (r != CUDA_SUCCESS) {
    unref(e);
    return r;
  }
  // The blocks are pinned by the caller (ensure_resident .. release), so no
  // spill can start while this runs.
  UseEvent* drop[64];
  int ndrop = 0;
  std::vector<UseEvent*> raced;  // another recorder filled the slots meanwhile
  {
    std::lock_guard<std::mutex> g(mu);
    for (Block* b : blocks) {
      int slot = -1;
      for (int i = 0; i < b->nuses; ++i)
        if (b->uses[i].stream == s) slot = i;
      UseEvent* old = nullptr;
      if (slot >= 0) {
        old = b->uses[slot].ev;
        b->uses[slot].ev = e;
      } else if (b->nuses < kMaxUseSlots) {
        b->uses[b->nuses++] = UseSlot{s, e};
      } else {
        // Drop the oldest slot; its work is waited for below, before the
        // caller unpins the block.
        old = b->uses[0].ev;
        b->uses[0] = UseSlot{s, e};
        old->refs.fetch_add(1, std::memory_order_relaxed);
        raced.push_back(old);
      }
      e->refs.fetch_add(1, std::memory_order_relaxed);
      if (old != nullptr) {
        if (ndrop < 64) drop[ndrop++] = old;
        else unref(old);
      }
      if (b->lru_hook.is_linked()) lru.splice(lru.end(), lru, lru.iterator_to(*b));
    }
  }
  unref(e);
  for (UseEvent* r : raced) {
    (void)TIERRT_CU(cuEventSynchronize, r->ev);
    unref(r);
  }
  for (int i = 0; i < ndrop; ++i) unref(drop[i]);
  return CUDA_SUCCESS;
}

Stats Impl::stats() const {
  Stats s;
  std::lock_guard<std::mutex> g(mu);
  for (int i = 0; i < kStateCount; ++i) {
    s.blocks[i] = st_blocks[i];
    s.bytes[i] = st_bytes[i];
  }
  for (int i = 0; i < 8; ++i) s.class_bytes[i] = class_bytes[i];
  s.cached_bytes = cache.bytes();
  s.spare_device_bytes = dev_spares.bytes();
  s.cached_blocks = cache.count();
  s.slab_bytes = slab_bytes.load();
  s.device_used = dev_budget.used();
  s.device_peak = dev_budget.peak();
  s.device_budget = dev_budget.limit();
  s.host_used = host_budget.used();
  s.host_peak = host_budget.peak();
  s.host_budget = host_budget.limit();
  s.pinned_pool_bytes = const_cast<HostTier&>(host).pinned_pool_bytes();
  s.allocs = n_allocs.load();
  s.cache_hits = n_cache_hits.load();
  s.driver_allocs = n_driver_allocs.load();
  s.spills = n_spills;
  s.spills_aborted = n_aborted;
  s.spills_refused_host_full = n_host_full;
  s.fetches = n_fetches;
  s.demand_fetches = n_demand;
  s.bytes_spilled = n_bytes_spilled;
  s.bytes_fetched = n_bytes_fetched;
  s.rescues = n_rescues;
  s.trimmed_bytes = n_trimmed;
  return s;
}

// ---- the public face ----

SpillResult Allocator::spill(Block* b) noexcept {
  if (b == nullptr) return SpillResult::NotSpillable;
  try {
    return impl_->spill(b);
  } catch (...) {
    return SpillResult::Failed;
  }
}

CUresult Allocator::prefetch(Block* b, CUstream consumer) noexcept {
  if (b == nullptr) return CUDA_ERROR_INVALID_VALUE;
  try {
    return impl_->fetch(b, consumer, false);
  } catch (const drv::Error& e) {
    return e.code();
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
}

CUresult Allocator::ensure_resident(std::span<Block* const> blocks, CUstream stream) noexcept {
  try {
    return impl_->ensure_resident(blocks, stream);
  } catch (const drv::Error& e) {
    return e.code();
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
}

void Allocator::release(std::span<Block* const> blocks) noexcept { impl_->release(blocks); }

CUresult Allocator::record_use(std::span<Block* const> blocks, CUstream stream,
                               bool capturing) noexcept {
  try {
    return impl_->record_use(blocks, stream, capturing);
  } catch (...) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
}

void Allocator::drain() noexcept { impl_->drain(); }
void Allocator::set_observer(MoveObserver* observer) noexcept {
  impl_->observer.store(observer, std::memory_order_release);
}
Stats Allocator::stats() const noexcept { return impl_->stats(); }

}  // namespace tierrt::alloc
