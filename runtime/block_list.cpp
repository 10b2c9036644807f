#include "runtime/block_list.h"

#include <algorithm>

namespace tierrt {

void BlockList::add_more(alloc::Block* b) noexcept {
  try {
    if (more_.empty()) more_.assign(items_, items_ + n_);
    if (std::find(more_.begin(), more_.end(), b) == more_.end()) more_.push_back(b);
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
// question they answer is then answered the cautious way). So every block
// is noted before any is dropped. The filter keeps the dropped blocks'
// bits too (a bit set only costs a search).
bool BlockList::drop_freed() noexcept {
  auto freed = [](alloc::Block* b) { return b->st() == alloc::State::Freed; };
  (void)notes();
  bool dropped;
  if (!more_.empty()) {
    dropped = std::erase_if(more_, freed) != 0;
    if (more_.empty()) n_ = 0;  // the inline items were copied into more_
  } else {
    const int before = n_;
    n_ = static_cast<int>(std::remove_if(items_, items_ + n_, freed) - items_);
    dropped = n_ != before;
  }
  noted_ = size();
  return dropped;
}

void BlockList::note_from(std::size_t first) const noexcept {
  const std::span<alloc::Block* const> all = span();
  Notes n = notes_;
  for (std::size_t i = first; i < all.size(); ++i) {
    const alloc::Block* b = all[i];
    n.any_slab |= b->slab;
    n.any_group |= b->group != nullptr;
    if (!b->slab) n.classes |= class_bit(b);
  }
  notes_ = n;
  noted_ = all.size();
}

bool BlockList::notes_cover_blocks() const noexcept {
  const Notes& n = notes();
  for (const alloc::Block* b : span())
    if ((b->slab && !n.any_slab) || (b->group != nullptr && !n.any_group)) return false;
  return true;
}

void BlockList::assign_distinct(std::span<alloc::Block* const> all) noexcept {
  more_.clear();
  n_ = 0;
  forget_notes();
  seen_ = ~std::uint64_t{0};  // an add searches
  if (all.size() <= static_cast<std::size_t>(kInline)) {
    std::copy(all.begin(), all.end(), items_);
    n_ = static_cast<int>(all.size());
    return;
  }
  try {
    more_.assign(all.begin(), all.end());
    n_ = kInline;  // the items are in more_
  } catch (...) {
    incomplete_ = true;
  }
}

}  // namespace tierrt
