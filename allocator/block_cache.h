// The size-ordered cache of freed blocks that keep their physical memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include <boost/intrusive/set.hpp>

#include "allocator/block.h"

namespace tierrt::alloc {

class BlockCache {
 public:
  BlockCache() = default;
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  ~BlockCache() { set_.clear(); }

  void insert(Block* b) noexcept {
    set_.insert(*b);
    bytes_ += b->mapped;
  }
  void erase(Block* b) noexcept {
    set_.erase(set_.iterator_to(*b));
    bytes_ -= b->mapped;
  }

  // Best fit: the smallest cached block of at least `mapped` bytes wasting at
  // most an eighth of it; among equal sizes, one freed on `stream` first.
  Block* take(std::size_t mapped, CUstream stream) noexcept {
    auto it = set_.lower_bound(mapped, KeyLess());
    if (it == set_.end() || it->mapped > mapped + mapped / 8) return nullptr;
    auto pick = it;
    for (int n = 0; n < 8 && it != set_.end() && it->mapped == pick->mapped; ++it, ++n)
      if (it->free_stream == stream) { pick = it; break; }
    Block* b = &*pick;
    erase(b);
    return b;
  }

  // The first of the `most` best-fitting blocks (as take() would consider
  // them) that `usable` accepts.
  template <class Pred>
  Block* take_if(std::size_t mapped, int most, Pred&& usable) {
    for (Block* b : fits(mapped, most))
      if (b != nullptr && usable(b)) {
        erase(b);
        return b;
      }
    return nullptr;
  }

  // Up to `most` (at most kMaxFits) cached blocks that fit `mapped`, best
  // first; the rest null.
  static constexpr int kMaxFits = 8;
  struct Fits {
    Block* b[kMaxFits] = {};
    Block* const* begin() const noexcept { return b; }
    Block* const* end() const noexcept { return b + kMaxFits; }
  };
  Fits fits(std::size_t mapped, int most) noexcept {
    Fits f;
    auto it = set_.lower_bound(mapped, KeyLess());
    for (int n = 0; n < most && n < kMaxFits && it != set_.end() && it->mapped <= mapped + mapped / 8; ++it, ++n)
      f.b[n] = &*it;
    return f;
  }

  // The largest cached block (the first to return to the driver).
  Block* largest() noexcept { return set_.empty() ? nullptr : &*set_.rbegin(); }

  template <class F>
  void for_each(F&& f) {
    for (Block& b : set_) f(&b);
  }

  bool empty() const noexcept { return set_.empty(); }
  std::size_t count() const noexcept { return set_.size(); }
  std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  struct Less {
    bool operator()(const Block& a, const Block& b) const noexcept { return a.mapped < b.mapped; }
  };
  struct KeyLess {
    bool operator()(const Block& a, std::size_t k) const noexcept { return a.mapped < k; }
    bool operator()(std::size_t k, const Block& a) const noexcept { return k < a.mapped; }
  };
  using Set = bi::multiset<Block,
                           bi::member_hook<Block, bi::set_member_hook<>, &Block::cache_hook>,
                           bi::compare<Less>>;
  Set set_;
  std::uint64_t bytes_ = 0;
};

}  // namespace tierrt::alloc
