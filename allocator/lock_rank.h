// The allocator's locks, in the only order they may be taken: a thread may
// take a lock only while every lock it holds has a lower rank (checked in
// builds with assertions, see ranked_mutex.h). No lock is held across a
// driver call that may wait for the device, nor across a call out of the
// allocator (the move observer is called with none held).
//
//  rank  name                guards                                   taken inside
//  10    alloc.pass_through  cuMemAlloc'ed pass-through pointers      -
//  20    alloc.slabs         slab pools and their free slots          -
//  30    alloc.blocks        block states, the resident list, the     -
//                            cache, moves under way, user pins
//  40    alloc.move_queue    moves waiting for the mover thread       -
//  44    alloc.open_table    which streams have an open use event     -
//  45    alloc.stream_uses   one stream's open use event (recorded    alloc.blocks,
//                            under it: a capture cannot begin between alloc.slabs
//                            the look and the record)
//  50    alloc.uses          use slots of every block and slab, the   alloc.blocks,
//                            event pool, timing-event pairs           alloc.slabs
//  60    alloc.host_tier     pinned pool growth                       -
//  70    alloc.pinned_pool   pinned chunks and their free ranges      alloc.host_tier (jemalloc's hooks)
//  80    alloc.chunk_spares  spare device / host chunks               -
//  90    alloc.granules      granule table leaves                     -
//
// Ranks leave gaps for locks to come; a part that never nests its lock
// still gets a rank, so that a nesting added later is checked.
#pragma once

namespace tierrt::alloc {

enum LockRank : unsigned {
  kRankPassThrough = 10,
  kRankSlabs = 20,
  kRankBlocks = 30,
  kRankMoveQueue = 40,
  kRankOpenTable = 44,
  kRankStreamUses = 45,
  kRankUses = 50,
  kRankHostTier = 60,
  kRankPinnedPool = 70,
  kRankChunkSpares = 80,
  kRankGranules = 90,
};

}  // namespace tierrt::alloc
