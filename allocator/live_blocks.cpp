// The live blocks, for work whose blocks cannot be told (a launch whose
// parameter layout the driver would not give): it names them all.
#include "parts.h"

namespace tierrt::alloc {

std::size_t Allocator::live_blocks(std::span<Block*> out) noexcept {
  std::size_t n = 0;
  auto l = p_->blocks.lock();
  p_->blocks.for_each_live(
      [&](Block* b) {
        if (n < out.size()) out[n] = b;
        ++n;
      },
      l);
  return n;
}

}  // namespace tierrt::alloc
