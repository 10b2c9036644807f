// Unmapped physical chunks kept for reuse, by size. Creating and releasing a
// chunk are among the slowest driver calls, and moves alternate: a spill
// releases a chunk of the size the next fetch needs. A chunk used before also
// has its pages in place.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "lock_rank.h"
#include "allocator/ranked_mutex.h"

namespace tierrt::alloc {

class ChunkSpares {
 public:
  using Handle = CUmemGenericAllocationHandle;

  void set_limit(std::uint64_t bytes) noexcept {
    std::lock_guard<RankedMutex> g(mu_);
    limit_ = bytes;
  }
  // A spare of exactly `bytes`, or false.
  bool take(std::size_t bytes, Handle* out) noexcept {
    std::lock_guard<RankedMutex> g(mu_);
    auto it = spares_.find(bytes);
    if (it == spares_.end()) return false;
    *out = it->second;
    spares_.erase(it);
    bytes_ -= bytes;
    return true;
  }
  // Keeps `h` unless that would pass the limit (false: the caller releases it).
  bool give(Handle h, std::size_t bytes) noexcept {
    std::lock_guard<RankedMutex> g(mu_);
    if (bytes_ + bytes > limit_) return false;
    spares_.emplace(bytes, h);
    bytes_ += bytes;
    return true;
  }
  // Hands over spares, largest first, until at least `bytes` (or all) left.
  std::vector<std::pair<std::size_t, Handle>> take_all(std::uint64_t bytes = UINT64_MAX) {
    std::lock_guard<RankedMutex> g(mu_);
    std::vector<std::pair<std::size_t, Handle>> out;
    std::uint64_t sum = 0;
    while (sum < bytes && !spares_.empty()) {
      auto it = std::prev(spares_.end());
      out.emplace_back(it->first, it->second);
      sum += it->first;
      bytes_ -= it->first;
      spares_.erase(it);
    }
    return out;
  }
  std::uint64_t bytes() const noexcept {
    std::lock_guard<RankedMutex> g(mu_);
    return bytes_;
  }

 private:
  // Rank 80 (lock_rank.h): nothing is taken inside it.
  mutable RankedMutex mu_{kRankChunkSpares, "alloc.chunk_spares"};
  std::multimap<std::size_t, Handle> spares_;
  std::uint64_t bytes_ = 0;
  std::uint64_t limit_ = 0;
};

}  // namespace tierrt::alloc
