// What a launch's block list notes of the blocks added (runtime/block_list.h):
// the launch path asks the notes instead of walking the blocks again, so a
// note may say more than the list holds (the cautious answer) but never less.
// And each block is in the list once, whatever its filter says.
#include "runtime/block_list.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace tierrt {
namespace {

std::uint32_t class_bit(std::uint8_t lifetime) { return std::uint32_t{1} << lifetime; }

struct Blocks {
  std::vector<std::unique_ptr<alloc::Block>> owned;
  alloc::Block* make(std::uint8_t lifetime, bool spillable = true) {
    owned.push_back(std::make_unique<alloc::Block>());
    alloc::Block* b = owned.back().get();
    b->state.store(alloc::State::Resident);
    b->lifetime.store(lifetime);
    b->spillable = spillable;
    return b;
  }
  // A small allocation slab's use record.
  alloc::Block* make_slab(std::uint8_t lifetime = 0) {
    alloc::Block* b = make(lifetime);
    b->slab = true;
    return b;
  }
};

TEST(BlockList, NotesTheClassesOfSpillableBlocksOfTheirOwn) {
  Blocks k;
  BlockList l;
  EXPECT_FALSE(l.any_slab());
  EXPECT_FALSE(l.any_group());
  EXPECT_EQ(l.spillable_classes(), 0u);
  l.add(k.make(1));
  l.add(k.make(3));
  l.add(k.make(2, /*spillable=*/false));  // never moves: its class says nothing
  EXPECT_EQ(l.spillable_classes(), class_bit(1) | class_bit(3));
  EXPECT_FALSE(l.any_slab());
  EXPECT_FALSE(l.any_group());
}

TEST(BlockList, NotesASlabsUseRecordAndAGroupsMember) {
  Blocks k;
  BlockList l;
  l.add(k.make_slab());
  EXPECT_TRUE(l.any_slab());
  EXPECT_EQ(l.spillable_classes(), 0u) << "a slab's record is not a spillable block";
  EXPECT_FALSE(l.any_group());
  alloc::Group g;
  alloc::Block* member = k.make(2);
  member->group = &g;
  l.add(member);
  EXPECT_TRUE(l.any_group());
  EXPECT_TRUE(l.notes_cover_blocks());
}

TEST(BlockList, AddsEachBlockOnceAndNotesIt) {
  Blocks k;
  BlockList l;
  alloc::Block* b = k.make(1);
  l.add(b);
  l.add(b);
  EXPECT_EQ(l.size(), 1u);
  EXPECT_EQ(l.spillable_classes(), class_bit(1));
}

TEST(BlockList, ANoteOutlivesTheBlockDroppedAsFreed) {
  Blocks k;
  BlockList l;
  alloc::Block* kept = k.make(1);
  alloc::Block* freed = k.make(2);
  l.add(kept);
  l.add(freed);
  freed->state.store(alloc::State::Freed);
  EXPECT_TRUE(l.drop_freed());
  EXPECT_EQ(l.size(), 1u);
  // More than the list holds: the cautious answer, never a wrong "lazy".
  EXPECT_EQ(l.spillable_classes(), class_bit(1) | class_bit(2));
  // The kept block moved down the list: added again, it is found there.
  l.add(kept);
  EXPECT_EQ(l.size(), 1u);
}

TEST(BlockList, AssigningNotesTheNewBlocksOnly) {
  Blocks k;
  BlockList l;
  l.add(k.make_slab());
  alloc::Block* all[] = {k.make(3), k.make(1)};
  l.assign_distinct(all);
  EXPECT_EQ(l.size(), 2u);
  EXPECT_FALSE(l.any_slab());
  EXPECT_EQ(l.spillable_classes(), class_bit(3) | class_bit(1));
}

TEST(BlockList, NotesBlocksPastTheInlineItems) {
  Blocks k;
  BlockList l;
  for (int i = 0; i < BlockList::kInline; ++i) l.add(k.make(1));
  l.add(k.make_slab(4));
  EXPECT_EQ(l.size(), static_cast<std::size_t>(BlockList::kInline) + 1);
  EXPECT_TRUE(l.any_slab());
  l.add(k.make(3));
  EXPECT_EQ(l.spillable_classes(), class_bit(1) | class_bit(3));
  EXPECT_TRUE(l.notes_cover_blocks());
}

// The filter has 64 bits: past a few dozen blocks most bits are set and an
// add searches; before, a bit another block set makes it search all the same.
TEST(BlockList, AddsEachOfManyBlocksOnceInAnyOrder) {
  Blocks k;
  std::vector<alloc::Block*> made;
  for (int i = 0; i < 200; ++i) made.push_back(k.make(static_cast<std::uint8_t>(i % 5)));
  BlockList l;
  for (int pass = 0; pass < 3; ++pass)
    for (std::size_t i = 0; i < made.size(); ++i) l.add(made[(i * 7 + static_cast<std::size_t>(pass)) % made.size()]);
  ASSERT_EQ(l.size(), made.size());
  std::vector<alloc::Block*> listed(l.span().begin(), l.span().end());
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(std::adjacent_find(listed.begin(), listed.end()), listed.end());
  std::uint32_t classes = 0;
  for (int c = 0; c < 5; ++c) classes |= class_bit(static_cast<std::uint8_t>(c));
  EXPECT_EQ(l.spillable_classes(), classes);
}

// The launch path notes the blocks it found itself (blocks of their own);
// a block added after them is noted at the next question.
TEST(BlockList, NotesTheCallerGaveStandUntilMoreBlocksAreAdded) {
  Blocks k;
  BlockList l;
  l.add(k.make(1));
  l.add(k.make(2));
  l.note_own_blocks(class_bit(1) | class_bit(2));
  EXPECT_EQ(l.spillable_classes(), class_bit(1) | class_bit(2));
  EXPECT_FALSE(l.any_slab());
  l.add(k.make_slab());
  l.add(k.make(4));
  EXPECT_TRUE(l.any_slab());
  EXPECT_EQ(l.spillable_classes(), class_bit(1) | class_bit(2) | class_bit(4));
  EXPECT_TRUE(l.notes_cover_blocks());
}

TEST(BlockList, ClassBitOfABlockThatNeverMovesIsNone) {
  Blocks k;
  EXPECT_EQ(BlockList::class_bit(k.make(3)), class_bit(3));
  EXPECT_EQ(BlockList::class_bit(k.make(3, /*spillable=*/false)), 0u);
}

}  // namespace
}  // namespace tierrt
