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

}  // namespace tierrt
