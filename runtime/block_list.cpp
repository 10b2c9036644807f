#include "runtime/block_list.h"

#include <algorithm>

namespace tierrt {

void BlockList::add_more(alloc::Block* b) noexcept {
  try {
    if (more_.empty()) more_.assign(items_, items_ + n_);
    if (std::find(more_.begin(), more_.end(), b) == more_.end()) {
      more_.push_back(b);
      note(b);
    }
  } catch (...) {
    incomplete_ = true;
  }
}

void BlockList::add_more_slot(CUdeviceptr at) noexcept {
  try {
    if (more_slots_.empty()) more_slots_.assign(slots_, slots_ + n_slots_);
    if (std::find(more_slots_.begin(), more_slots_.end(), at) == more_slots_.end()) more_slots_.push_back(at);
  } catch (...) {
    incomplete_ = true;
  }
}

// The notes stay: a list's notes may name more than it holds (each
// question they answer is then answered the cautious way).
bool BlockList::drop_freed() noexcept {
  auto freed = [](alloc::Block* b) { return b->st() == alloc::State::Freed; };
  if (!more_.empty()) {
    const bool dropped = std::erase_if(more_, freed) != 0;
    if (more_.empty()) n_ = 0;  // the inline items were copied into more_
    return dropped;
  }
  const int before = n_;
  n_ = static_cast<int>(std::remove_if(items_, items_ + n_, freed) - items_);
  return n_ != before;
}

bool BlockList::notes_cover_blocks() const noexcept {
  for (const alloc::Block* b : span())
    if ((b->slab && !any_slab_) || (b->group != nullptr && !any_group_)) return false;
  return true;
}

void BlockList::assign_distinct(std::span<alloc::Block* const> all) noexcept {
  more_.clear();
  n_ = 0;
  forget_notes();
  for (const alloc::Block* b : all) note(b);
  if (all.size() <= static_cast<std::size_t>(kInline)) {
    std::copy(all.begin(), all.end(), items_);
    n_ = static_cast<int>(all.size());
    return;
  }
  try {
    more_.assign(all.begin(), all.end());
  } catch (...) {
    incomplete_ = true;
  }
}

}  // namespace tierrt
