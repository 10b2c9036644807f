#include "runtime/capture_tracker.h"

#include <cstdint>
#include <functional>

#include "driver/driver.h"

namespace tierrt {

namespace {
constexpr int kFree = 0, kBusy = 1, kLive = 2;
}  // namespace

// Per-thread default streams share one handle: a capture of one thread's is
// told apart by the thread that began or joined it.
const void* CaptureTracker::thread_token() noexcept {
  static thread_local char token;
  return &token;
}

void CaptureTracker::add(CUstream s, std::uint64_t id, int mode, bool discovered) noexcept {
  // Every stream of a capture has the capture's mode: the first one's.
  int known_mode = 0;
  if (mode_of(id, &known_mode)) mode = known_mode;
  else if (discovered && hold_fn_) hold_fn_(hold_owner_);
  for (Slot& slot : slots_) {
    int expected = kFree;
    if (!slot.state.compare_exchange_strong(expected, kBusy, std::memory_order_acq_rel)) continue;
    slot.stream.store(s, std::memory_order_relaxed);
    slot.thread.store(per_thread(s) ? thread_token() : nullptr, std::memory_order_relaxed);
    slot.id.store(id, std::memory_order_relaxed);
    slot.mode.store(mode, std::memory_order_relaxed);
    slot.state.store(kLive, std::memory_order_release);
    active_.fetch_add(1, std::memory_order_acq_rel);
    return;
  }
  // More capturing streams than slots: every stream counts as capturing
  // (nothing is recorded into any, nothing they name moves) until one ends.
  overflow_.fetch_add(1, std::memory_order_acq_rel);
  active_.fetch_add(kOverflow, std::memory_order_acq_rel);
}

bool CaptureTracker::begin(CUstream s, CUstreamCaptureMode mode, std::uint64_t id) noexcept {
  // Found through the driver already (it, or a stream joined to it), and
  // held as a global one.
  int known_mode = 0;
  const bool known_capture = mode_of(id, &known_mode);
  if (find(s) == nullptr) add(s, id, mode, false);
  return !known_capture;
}

CaptureTracker::Ended CaptureTracker::end(std::uint64_t id) noexcept {
  Ended ended;
  int mode = 0;
  if (!mode_of(id, &mode)) {
    // A capture whose stream found no free slot: one of the overflow's ends.
    int n = overflow_.load(std::memory_order_acquire);
    while (n > 0 && !overflow_.compare_exchange_weak(n, n - 1, std::memory_order_acq_rel)) {
    }
    if (n > 0) active_.fetch_sub(kOverflow, std::memory_order_acq_rel);
    return ended;
  }
  ended.id = id;
  ended.global = mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
  for (Slot& slot : slots_) {
    int expected = kLive;
    if (slot.id.load(std::memory_order_relaxed) != id ||
        !slot.state.compare_exchange_strong(expected, kBusy, std::memory_order_acq_rel))
      continue;
    if (slot.id.load(std::memory_order_relaxed) == id) {
      slot.stream.store(nullptr, std::memory_order_relaxed);
      slot.state.store(kFree, std::memory_order_release);
      active_.fetch_sub(1, std::memory_order_acq_rel);
    } else {
      slot.state.store(kLive, std::memory_order_release);
    }
  }
  if (recorded_.load(std::memory_order_acquire) != 0)
    for (EventSlot& e : events_) {
      if (e.id.load(std::memory_order_relaxed) != id) continue;
      CUevent ev = e.ev.load(std::memory_order_relaxed);
      e.id.store(0, std::memory_order_release);
      if (ev != nullptr && e.ev.compare_exchange_strong(ev, nullptr, std::memory_order_acq_rel))
        recorded_.fetch_sub(1, std::memory_order_acq_rel);
    }
  return ended;
}

const CaptureTracker::Slot* CaptureTracker::find(CUstream s) const noexcept {
  const void* thread = per_thread(s) ? thread_token() : nullptr;
  for (const Slot& slot : slots_)
    if (slot.state.load(std::memory_order_acquire) == kLive && slot.stream.load(std::memory_order_relaxed) == s &&
        slot.thread.load(std::memory_order_relaxed) == thread)
      return &slot;
  return nullptr;
}

bool CaptureTracker::mode_of(std::uint64_t id, int* mode) const noexcept {
  for (const Slot& slot : slots_)
    if (slot.state.load(std::memory_order_acquire) == kLive && slot.id.load(std::memory_order_relaxed) == id) {
      *mode = slot.mode.load(std::memory_order_relaxed);
      return true;
    }
  return false;
}

std::uint64_t CaptureTracker::capture_id(CUstream s) const noexcept {
  const Slot* slot = find(s);
  return slot ? slot->id.load(std::memory_order_relaxed) : 0;
}

bool CaptureTracker::capturing_slow(CUstream s) const noexcept {
  if (active_.load(std::memory_order_acquire) >= kOverflow) return true;
  return find(s) != nullptr;
}

// A stream is asked about once: after that, every capture it begins or joins
// passes through a hook. The legacy stream never captures.
bool CaptureTracker::known(CUstream s) noexcept {
  if (s == nullptr || s == CU_STREAM_LEGACY) return true;
  if (per_thread(s)) {
    static thread_local const CaptureTracker* asked_by = nullptr;
    if (asked_by == this) return true;
    asked_by = this;
    return false;
  }
  const std::size_t h = std::hash<const void*>{}(s) * 0x9E3779B97F4A7C15ull;
  for (std::size_t i = 0; i < 8; ++i) {
    std::atomic<CUstream>& entry = known_[(h + i) % kKnown];
    CUstream seen = entry.load(std::memory_order_acquire);
    if (seen == s) return true;
    if (seen == nullptr && entry.compare_exchange_strong(seen, s, std::memory_order_acq_rel)) return false;
    if (seen == s) return true;
  }
  return false;  // the table is full around s: ask every time
}

void CaptureTracker::discover(CUstream s) noexcept {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (TIERRT_CU(cuStreamGetCaptureInfo, s, &status, &id, nullptr, nullptr, nullptr, nullptr) != CUDA_SUCCESS ||
      status == CU_STREAM_CAPTURE_STATUS_NONE || find(s) != nullptr)
    return;
  // Its mode is not for tierrt to know: held as if global.
  add(s, id, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}

void CaptureTracker::note_record(CUevent ev, CUstream s) noexcept {
  if (ev == nullptr) return;
  const std::uint64_t id = capturing(s) ? capture_id(s) : 0;
  if (id == 0 && recorded_.load(std::memory_order_acquire) == 0) return;
  EventSlot* free_slot = nullptr;
  for (EventSlot& e : events_) {
    CUevent seen = e.ev.load(std::memory_order_acquire);
    if (seen == ev) {
      if (id != 0) {
        e.id.store(id, std::memory_order_release);
      } else {
        e.id.store(0, std::memory_order_release);
        if (e.ev.compare_exchange_strong(seen, nullptr, std::memory_order_acq_rel))
          recorded_.fetch_sub(1, std::memory_order_acq_rel);
      }
      return;
    }
    if (seen == nullptr && free_slot == nullptr) free_slot = &e;
  }
  for (EventSlot* e = free_slot; id != 0 && e != events_ + kEvents; ++e) {
    CUevent none = nullptr;
    if (e->ev.compare_exchange_strong(none, ev, std::memory_order_acq_rel)) {
      e->id.store(id, std::memory_order_release);  // read as "not captured" until then
      recorded_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
  }
}

void CaptureTracker::note_wait(CUstream s, CUevent ev) noexcept {
  if (ev == nullptr || recorded_.load(std::memory_order_acquire) == 0) return;
  for (const EventSlot& e : events_) {
    if (e.ev.load(std::memory_order_acquire) != ev) continue;
    const std::uint64_t id = e.id.load(std::memory_order_acquire);
    int mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (id != 0 && capture_id(s) != id && mode_of(id, &mode)) add(s, id, mode, false);
    return;
  }
}

}  // namespace tierrt
