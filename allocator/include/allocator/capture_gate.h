// Keeps tierrt's stream probes out of the application's captures.
//
// Some driver calls end a capture they meet: a synchronize or query of a
// stream that captures, and a context synchronize while any stream of the
// context captures (each invalidates the capture, which the application
// then learns from its next call on that stream). tierrt makes such calls
// only to wait for a use it has no event for, and only on a stream that
// said it does not capture. Between that answer and the call, the stream's
// owner may begin a capture on another thread. The gate closes that window:
// a probe (the question and the call) runs only while no capture is
// beginning, and a capture begins only once no probe is in flight. A
// context synchronize runs only while no capture the gate knows of is open.
//
// Both sides store their count and then load the other's, sequentially
// consistent: at least one of them sees the other. A probe that sees a
// capture beginning withdraws and waits for it; a beginning capture waits
// for the probes in flight (each a query, or a synchronize of one stream or
// of the context, which ends once the device work already queued does).
//
// One gate per process: tierrt's waits are made from any thread, for any
// device's streams.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

namespace tierrt::alloc {

class CaptureGate {
 public:
  static CaptureGate& process() noexcept;

  // The application's calls that start or end a capture on a stream, made
  // through the gate by the capture hooks, innermost (the driver's call
  // itself):
  // - `begin`: cuStreamBeginCapture in every form. Counted open from before
  //   it begins, with no probe in flight meanwhile; not counted if the
  //   driver refused it.
  // - `join`: cuStreamWaitEvent, while a capture is open (the event may be
  //   a capture's: the waiting stream then joins that capture).
  // - `end`: cuStreamEndCapture on `s`. Counted closed once the driver says
  //   `s` captures no more (an invalidated capture ends too; End on the
  //   wrong thread or stream ends nothing).
  template <class Call>
  CUresult begin(Call&& call) noexcept {
    capture_opened();
    enter_begin();
    const CUresult r = call();
    leave_begin();
    if (r != CUDA_SUCCESS) capture_closed();
    return r;
  }
  template <class Call>
  CUresult join(Call&& call) noexcept {
    if (open_captures() == 0) return call();
    enter_begin();
    const CUresult r = call();
    leave_begin();
    return r;
  }
  template <class Call>
  CUresult end(CUstream s, Call&& call) noexcept {
    const bool was = captures(s);
    const CUresult r = call();
    if (was && !captures(s)) capture_closed();
    return r;
  }
  // Captures the gate knows to be open (begun through it, not yet ended).
  std::int64_t open_captures() const noexcept { return open_.load(std::memory_order_seq_cst); }

  // tierrt's side: a stream probe, for the life of the object. Waits while a
  // capture is beginning.
  class Probe {
   public:
    Probe() noexcept : gate_(process()) { gate_.enter_probe(); }
    ~Probe() { gate_.leave_probe(); }
    Probe(const Probe&) = delete;
    Probe& operator=(const Probe&) = delete;
    // No capture the gate knows of is open: a context synchronize ends none.
    bool no_capture_open() const noexcept { return gate_.open_captures() == 0; }

   private:
    CaptureGate& gate_;
  };

 private:
  // A begin or join is about to go out: waits until no probe is in flight;
  // until leave_begin() no probe starts.
  void enter_begin() noexcept;
  void leave_begin() noexcept;
  void capture_opened() noexcept { open_.fetch_add(1, std::memory_order_seq_cst); }
  void capture_closed() noexcept;
  void enter_probe() noexcept;
  void leave_probe() noexcept { probes_.fetch_sub(1, std::memory_order_seq_cst); }
  // The driver says `s` captures (an invalidated capture too); false when it cannot say.
  static bool captures(CUstream s) noexcept;

  std::atomic<std::int64_t> probes_{0};
  std::atomic<std::int64_t> beginning_{0};
  std::atomic<std::int64_t> open_{0};
};

}  // namespace tierrt::alloc
