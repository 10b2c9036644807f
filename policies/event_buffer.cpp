#include "policies/event_buffer.hpp"

#include <sys/mman.h>

#include <new>
#include <type_traits>
#include <utility>

namespace tierrt::policy {

// The pages are moved, not the objects: an event must be plain bytes.
static_assert(std::is_trivially_copyable_v<Event> && std::is_trivially_destructible_v<Event>);

EventBuffer::~EventBuffer() {
  if (data_ != nullptr) munmap(data_, capacity_ * sizeof(Event));
}

EventBuffer::EventBuffer(EventBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

EventBuffer& EventBuffer::operator=(EventBuffer&& other) noexcept {
  if (this != &other) {
    EventBuffer gone(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void EventBuffer::grow() {
  const std::size_t old_bytes = capacity_ * sizeof(Event);
  const std::size_t bytes = old_bytes == 0 ? kFirstBytes : 2 * old_bytes;
  void* p = data_ == nullptr ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                             : mremap(data_, old_bytes, bytes, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // Advice only: where transparent huge pages are off, 4 KiB pages serve.
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  data_ = static_cast<Event*>(p);
  capacity_ = bytes / sizeof(Event);
}

}  // namespace tierrt::policy
