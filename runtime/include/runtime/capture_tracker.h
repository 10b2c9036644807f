// Which streams are capturing a CUDA graph right now, so that a launch, copy,
// allocation or free can tell without asking the driver each time.
//
// A capture is known from the capture hooks (cuStreamBeginCapture in every
// form, cuStreamBeginCaptureToGraph), from side streams joined to it through
// events (cuEventRecord on a capturing stream, then cuStreamWaitEvent on
// another), and, for a capture begun before tierrt was there to see it, from
// one cuStreamGetCaptureInfo per stream the first time tierrt meets the
// stream. Lock-free: fixed tables of atomics; when a table is full the answer
// errs on the side of "capturing" or of asking the driver again.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

namespace tierrt {

class CaptureTracker {
 public:
  // What a capture that ended was, for whoever kept state about it.
  struct Ended {
    std::uint64_t id = 0;  // 0: no capture was known on that stream
    bool global = false;   // it held memory moves (global mode, or mode unknown)
  };

  // `s` began capture `id` in `mode`. False when the capture was already found through the driver (and holds
  // moves as a global one would).
  bool begin(CUstream s, CUstreamCaptureMode mode, std::uint64_t id) noexcept;
  // Capture `id` ended: every stream in it stops capturing. Nothing (id 0)
  // when no stream of it was known.
  Ended end(std::uint64_t id) noexcept;

  // cuEventRecord(ev, s) went out: an event recorded into a capture joins
  // whoever waits on it to that capture.
  void note_record(CUevent ev, CUstream s) noexcept;
  // cuStreamWaitEvent(s, ev) went out: `s` joins the capture `ev` was
  // recorded in, if any.
  void note_wait(CUstream s, CUevent ev) noexcept;

  // True when work on `s` is being captured. The legacy stream never is:
  // work on it runs (or the driver refuses it while a blocking stream
  // captures in global mode).
  bool capturing(CUstream s) noexcept {
    if (!known(s)) discover(s);
    if (active_.load(std::memory_order_acquire) == 0) return false;
    return capturing_slow(s);
  }
  // Whether any capture is known to be open (a stream may join it).
  bool any_active() const noexcept { return active_.load(std::memory_order_acquire) != 0; }
  // The capture `s` takes part in; 0 when none is known.
  std::uint64_t capture_id(CUstream s) const noexcept;

  // Told of every capture found through the driver (its mode unknown: held
  // as global) before it is visible; its end() says global. Set once, before
  // any other call.
  using HoldFn = void (*)(void* owner);
  void on_hold(HoldFn fn, void* owner) noexcept {
    hold_owner_ = owner;
    hold_fn_ = fn;
  }

 private:
  static constexpr int kSlots = 64, kEvents = 256, kKnown = 4096;
  // A slot is free (0), being written or cleared (1), or live (2): readers
  // look only at live slots.
  struct Slot {
    std::atomic<int> state{0};
    std::atomic<CUstream> stream{nullptr};
    std::atomic<const void*> thread{nullptr};  // the owner of a per-thread default stream
    std::atomic<std::uint64_t> id{0};
    std::atomic<int> mode{CU_STREAM_CAPTURE_MODE_GLOBAL};
  };
  struct EventSlot {
    std::atomic<CUevent> ev{nullptr};
    std::atomic<std::uint64_t> id{0};
  };

  bool known(CUstream s) noexcept;
  void discover(CUstream s) noexcept;
  bool capturing_slow(CUstream s) const noexcept;
  // Adds `s` to capture `id`; the first stream of a capture found through
  // the driver holds moves (a hook-begun global-mode capture was held before
  // it began).
  void add(CUstream s, std::uint64_t id, int mode, bool discovered) noexcept;
  const Slot* find(CUstream s) const noexcept;
  // The mode of capture `id`, when a live slot has it.
  bool mode_of(std::uint64_t id, int* mode) const noexcept;
  static const void* thread_token() noexcept;
  static bool per_thread(CUstream s) noexcept { return s == CU_STREAM_PER_THREAD; }

  Slot slots_[kSlots];
  EventSlot events_[kEvents];
  std::atomic<CUstream> known_[kKnown] = {};
  std::atomic<int> active_{0};    // live slots, +kOverflow per stream that found none free
  std::atomic<int> overflow_{0};  // streams capturing that found no free slot
  std::atomic<int> recorded_{0};  // live event slots
  HoldFn hold_fn_ = nullptr;
  void* hold_owner_ = nullptr;
  static constexpr int kOverflow = 1 << 16;
};

}  // namespace tierrt
