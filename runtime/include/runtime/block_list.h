// The distinct blocks one launch or copy names, gathered by the engine on the
// caller's stack; on the heap only for the rare launch that names more than
// kInline (a kernel taking a table of pointers by value: up to 4096 in 32 KiB
// of parameters). Engine-internal: hooks never see one.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "allocator/block.h"

namespace tierrt {

class BlockList {
 public:
  static constexpr int kInline = 256;
  void add(alloc::Block* b) noexcept {
    if (n_ == kInline) return add_more(b);  // the inline items are full, or in more_
    // Searched for only where the filter says it may be in the list: a
    // launch naming 8 distinct blocks makes no search (28 comparisons).
    const std::uint64_t bit = filter_bit(b);
    if ((seen_ & bit) != 0)
      for (int i = 0; i < n_; ++i)
        if (items_[i] == b) return;
    seen_ |= bit;
    items_[n_++] = b;
  }
  // A small-allocation slot named at `at`: its slab's use record (added as a
  // block) takes the use, but what the slot holds (a pointer table) is found
  // by its address, which a graph keeps to look at again at each launch.
  void add_slot(CUdeviceptr at) noexcept {
    if (!more_slots_.empty() || n_slots_ == kInlineSlots) return add_more_slot(at);
    for (int i = 0; i < n_slots_; ++i)
      if (slots_[i] == at) return;
    slots_[n_slots_++] = at;
  }
  std::span<const CUdeviceptr> slots() const noexcept {
    if (!more_slots_.empty()) return {more_slots_.data(), more_slots_.size()};
    return {slots_, static_cast<std::size_t>(n_slots_)};
  }
  bool empty() const noexcept { return n_ == 0 && more_.empty(); }
  std::size_t size() const noexcept { return more_.empty() ? static_cast<std::size_t>(n_) : more_.size(); }
  alloc::Block* operator[](std::size_t i) const noexcept { return more_.empty() ? items_[i] : more_[i]; }
  // Drops the blocks freed since they were added; false when none was.
  bool drop_freed() noexcept;
  void mark_incomplete() noexcept { incomplete_ = true; }
  // Makes the list `all`, blocks known distinct (no search for duplicates).
  void assign_distinct(std::span<alloc::Block* const> all) noexcept;
  // The heap could not hold the list: the work must not go out (some of its
  // blocks would not be made resident).
  bool incomplete() const noexcept { return incomplete_; }
  // Made resident by announcing the launch rather than pinning the blocks
  // (Allocator::ensure_resident_briefly): what release() needs to know.
  void set_announced(bool announced) noexcept { announced_ = announced; }
  bool announced() const noexcept { return announced_; }
  // A block of its own's class bit (what its note adds to spillable_classes).
  static std::uint32_t class_bit(const alloc::Block* b) noexcept {
    return b->spillable ? std::uint32_t{1} << (b->lifetime.load(std::memory_order_relaxed) & 31) : 0;
  }
  // Every block in the list is a block of its own (neither a slab's use
  // record nor a granule group's member or record), and `classes` are
  // their class bits: the notes, as the caller read them.
  void note_own_blocks(std::uint32_t classes) noexcept {
    notes_ = Notes{false, false, classes};
    noted_ = size();
  }
  // What the blocks are, noted at the first question after blocks were
  // added (in one pass: the launch path asks a few times per list, and
  // noting each block as it was added cost it a store per flag per block):
  // a small allocation's use record among them; a granule group's member
  // or record among them; and the lifetime classes (bit 1 << Block::lifetime)
  // of the spillable blocks of their own. A block's class may change after
  // it was added: a question may read either class, as it would reading
  // the block.
  bool any_slab() const noexcept { return notes().any_slab; }
  bool any_group() const noexcept { return notes().any_group; }
  std::uint32_t spillable_classes() const noexcept { return notes().classes; }
  // Whether the notes say at least what each block in the list is (debug
  // checks: a block's class may have changed since it was added).
  bool notes_cover_blocks() const noexcept;
  std::span<alloc::Block* const> span() const noexcept {
    if (!more_.empty()) return {more_.data(), more_.size()};
    return {items_, static_cast<std::size_t>(n_)};
  }

 private:
  static constexpr int kInlineSlots = 16;
  // A bit per block for the filter (blocks are 64-byte aligned: the low
  // bits say nothing, a multiplicative hash spreads the rest).
  static std::uint64_t filter_bit(const alloc::Block* b) noexcept {
    return std::uint64_t{1} << ((reinterpret_cast<std::uintptr_t>(b) * 0x9E3779B97F4A7C15ull) >> 58);
  }
  struct Notes {
    bool any_slab = false;
    bool any_group = false;
    std::uint32_t classes = 0;
  };
  // The notes, with the blocks added since the last question noted.
  const Notes& notes() const noexcept {
    const std::span<alloc::Block* const> all = span();
    if (noted_ != all.size()) note_from(noted_);
    return notes_;
  }
  void note_from(std::size_t first) const noexcept;
  void forget_notes() noexcept {
    notes_ = Notes{};
    noted_ = 0;
  }
  void add_more(alloc::Block* b) noexcept;
  void add_more_slot(CUdeviceptr at) noexcept;
  alloc::Block* items_[kInline];
  // The inline items; kInline whenever more_ holds the list (it does once
  // the inline items are full), so that an add asks one question.
  int n_ = 0;
  std::vector<alloc::Block*> more_;
  CUdeviceptr slots_[kInlineSlots];
  int n_slots_ = 0;
  std::vector<CUdeviceptr> more_slots_;
  // A filter of the inline items: each one's filter_bit is set (a bit set
  // may be another's, or a dropped block's).
  std::uint64_t seen_ = 0;
  bool incomplete_ = false;
  bool announced_ = false;
  // Of span(), the first noted_ blocks are in notes_.
  mutable Notes notes_;
  mutable std::size_t noted_ = 0;
};

}  // namespace tierrt
