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
};

struct Event {
  unsigned flags = 0;
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
