// Where Block objects live: in chunks, made one after another, never freed
// before the allocator (type-stable: a launch may read a block that was
// recycled meanwhile). Adjacent in the order they were made, where a deque
// of 448-byte blocks put each in an allocation of its own, between whatever
// else was allocated meanwhile: a launch naming tensors made one after
// another (a step's activations) reads neighbouring lines.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "allocator/block.h"

namespace tierrt::alloc {

class BlockStorage {
 public:
  // A new block (throws std::bad_alloc).
  Block* make() {
    if (made_ % kChunk == 0) chunks_.push_back(std::make_unique<Block[]>(kChunk));
    return &chunks_.back()[made_++ % kChunk];
  }
  template <class F>
  void for_each(F&& f) {
    for (std::size_t i = 0; i < made_; ++i) f(chunks_[i / kChunk][i % kChunk]);
  }

 private:
  static constexpr std::size_t kChunk = 128;  // 56 KiB
  std::vector<std::unique_ptr<Block[]>> chunks_;
  std::size_t made_ = 0;
};

}  // namespace tierrt::alloc
