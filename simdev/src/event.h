// Events: a mark in a stream ("item n of stream S"), with the time the
// stream reached it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "stream.h"

namespace simdev {

struct EventMark {
  StreamPtr stream;
  uint64_t seq = 0;                // 0: recorded during capture (nothing to wait for)
  std::atomic<long long> ns{-1};   // steady-clock time the stream reached it
  // Recorded into a capturing stream: the sequence, and the nodes a stream
  // that waits on the event comes to depend on (guarded by graph_mutex()).
  std::shared_ptr<CaptureSequence> capture;
  std::vector<size_t> nodes;
};

struct Event {
  unsigned flags = 0;
  Context* ctx = nullptr;  // the context that created it
  std::mutex mu;
  std::shared_ptr<EventMark> mark;  // null until first recorded

  std::shared_ptr<EventMark> current() {
    std::lock_guard lock(mu);
    return mark;
  }
};

// Validates an event handle.
Event* find_event(CUevent e);

}  // namespace simdev
