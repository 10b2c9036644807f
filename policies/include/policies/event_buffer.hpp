// The events of the step being learned (PolicyEngine), in one contiguous
// run that timelines and the step detector read as a span. It grows by
// moving its pages (mremap), never by copying its bytes, and asks for huge
// pages. A step may run to PolicyEngine::Options::max_step_events (96 MiB),
// and a std::vector growing towards that copied itself at each doubling
// into memory faulted in 4 KiB at a time: recording an event took 82-542 ns
// (a launch and 8 uses at a time, up to 4 M events, on a 2-core VM), most
// of it in page faults and copies, on the thread that must keep up with the
// launches. clear() keeps the memory: the next step fills pages already in.
#pragma once

#include <cassert>
#include <cstddef>
#include <span>

#include "policies/event.hpp"

namespace tierrt::policy {

class EventBuffer {
 public:
  EventBuffer() = default;
  ~EventBuffer();
  EventBuffer(EventBuffer&& other) noexcept;
  EventBuffer& operator=(EventBuffer&& other) noexcept;
  EventBuffer(const EventBuffer&) = delete;
  EventBuffer& operator=(const EventBuffer&) = delete;

  // Throws std::bad_alloc when it cannot grow (the planner's failure path).
  void push_back(const Event& e) {
    if (size_ == capacity_) grow();
    data_[size_++] = e;
  }
  void clear() noexcept { size_ = 0; }
  // Drops the events from `n` on; it never lengthens the buffer.
  void resize(std::size_t n) noexcept {
    assert(n <= size_);
    size_ = n;
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t capacity() const noexcept { return capacity_; }
  Event& operator[](std::size_t i) noexcept {
    assert(i < size_);
    return data_[i];
  }
  const Event& operator[](std::size_t i) const noexcept {
    assert(i < size_);
    return data_[i];
  }
  Event* data() noexcept { return data_; }
  const Event* data() const noexcept { return data_; }
  Event* begin() noexcept { return data_; }
  Event* end() noexcept { return data_ + size_; }
  const Event* begin() const noexcept { return data_; }
  const Event* end() const noexcept { return data_ + size_; }
  operator std::span<const Event>() const noexcept { return {data_, size_}; }

  // The first mapping: a huge page's worth.
  static constexpr std::size_t kFirstBytes = std::size_t{2} << 20;

 private:
  void grow();
  Event* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;  // in events; the mapping is capacity_ * sizeof(Event) bytes
};

}  // namespace tierrt::policy
