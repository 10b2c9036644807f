// The engine's launch path: what a launch, copy or memset names, made
// resident around the forwarded call, then counted and told to the planner
// and the recording; and the pointer tables copies fill.
#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "driver/driver.h"
#include "policies/lifetime_class.hpp"
#include "runtime/engine.h"
#include "host_clock.h"

namespace tierrt {

bool Engine::collect_word(CUdeviceptr word, BlockList& out) noexcept {
  if (!word) return true;
  if (alloc::Block* b = alloc_->lookup(word)) {
    if (b->group) {
      collect_extent(b, word, out);
      return true;
    }
    // A word into freed memory is never dereferenced by a correct program:
    // it names nothing (the GPU does not care either).
    if (b->st() != alloc::State::Freed) out.add(b);
    return true;
  }
  // A small-allocation slot: its slab's use record takes the use, so that a
  // freed slot waits for the work that named it.
  alloc::Block* slab = alloc_->use_target(word);
  if (!slab) return true;
  out.add(slab);
  out.add_slot(word);
  // A slot may also hold a pointer table.
  if (pointers_.empty()) return true;
  auto lock = pointers_.lock();
  return pointers_.targets_of(word, [&](PointerTables::Unit target) { add_live(target, out); }, lock);
}

void Engine::collect_extent(alloc::Block* b, CUdeviceptr word, BlockList& out) noexcept {
  // A word is where a buffer starts: the buffer reaches at most to where the
  // next one a launch named starts. Where that is wrong the kernel reaches a
  // member nobody named, which remap mode keeps correct: a spilled member's
  // VA is on its host copy (read over the link), and no member moves while
  // the launch may run (the group's fence).
  alloc::Group* g = b->group;
  const std::uint32_t i = b->member;
  if (!usable(b) || i >= g->count) return;  // freed since: names nothing
  g->learn(i, word == b->va);
  const std::size_t unit = g->unit;
  const std::uint64_t cap = settings_.granule_extent == 0 ? 0 : (settings_.granule_extent + unit - 1) / unit;
  const std::uint32_t end = g->extent_end(i, cap > UINT32_MAX ? 0 : static_cast<std::uint32_t>(cap));
  out.add(b);
  // The kernel may reach any member all the same: the group's use record
  // takes the use, and no member's move runs with it (block.h, Group).
  out.add(g->record);
  for (std::uint32_t j = i + 1; j < end; ++j)
    if (alloc::Block* m = alloc_->lookup(b->va + (j - i) * unit); m && m->group == g && usable(m)) out.add(m);
}

bool Engine::collect_launch(CUfunction f, void** params, void** extra, BlockList& out) noexcept {
  bool known = true;
  const alloc::GranuleView granules = alloc_->granules();
  // While every block in the list is one the common case found, the list's
  // notes are these classes (noted here, where each block is read anyway).
  std::uint32_t classes = 0;
  bool only_own_blocks = out.empty();
  auto scan_word = [&](const unsigned char* p) {
    CUdeviceptr word;
    std::memcpy(&word, p, sizeof word);
    // Most words of a kernel's parameters are not tierrt's memory (sizes,
    // strides, scalars): one lookup says so, with no call.
    const std::uintptr_t entry = word ? granules.find(word) : 0;
    if (entry == 0) return;
    // The common pointer, inline: a live block of its own (collect_word's
    // first case, without its call).
    if (alloc::Block* b = alloc::Allocator::block_of(entry); b && !b->group && b->st() != alloc::State::Freed) {
      classes |= BlockList::class_bit(b);
      return out.add(b);
    }
    const std::size_t before = out.size();
    known &= collect_word(word, out);
    only_own_blocks &= out.size() == before;
  };
  auto noted = [&] {
    if (only_own_blocks) out.note_own_blocks(classes);
    return known;
  };
  if (params) {
    const ParamLayout layout = layouts_.get(f);
    if (!layout.known) return false;
    // Words aligned in the parameter buffer, each read from its parameter's copy.
    for (std::uint32_t i = 0; i < layout.count; ++i) {
      const ParamWord w = layout.words[i];
      if (const void* param = params[w.param]) scan_word(static_cast<const unsigned char*>(param) + w.offset);
    }
    return noted();
  }
  if (extra) {
    const unsigned char* buffer = nullptr;
    size_t size = 0;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = static_cast<const unsigned char*>(extra[i + 1]);
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1]) size = *static_cast<size_t*>(extra[i + 1]);
    }
    if (buffer)
      for (size_t w = 0; w + 8 <= size; w += 8) scan_word(buffer + w);
  }
  return noted();
}

// Transitively: a block a table points to may hold a table itself. The list
// grows while it is walked; each block is in it once, so the walk ends.
bool Engine::add_pointed_to(BlockList& blocks) noexcept {
  if (pointers_.empty() || blocks.empty()) return true;
  auto lock = pointers_.lock();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const bool known = pointers_.targets_of(
        unit_of(blocks[i]), [&](PointerTables::Unit target) { add_live(target, blocks); }, lock);
    if (!known) return false;
  }
  return true;
}

void Engine::name_every_block(BlockList& blocks) noexcept {
  alloc::Block* inline_list[BlockList::kInline];
  std::size_t n = alloc_->live_blocks(inline_list);
  if (n <= BlockList::kInline) return blocks.assign_distinct({inline_list, n});
  // Rare (a function the driver would not describe): the heap is allowed.
  try {
    std::vector<alloc::Block*> all(n + n / 8);
    while ((n = alloc_->live_blocks(all)) > all.size()) all.resize(n + n / 8);
    blocks.assign_distinct({all.data(), n});
  } catch (...) {
    blocks.assign_distinct({});
    blocks.mark_incomplete();
  }
}

PointerTables::Unit Engine::unit_of(CUdeviceptr p) const noexcept {
  if (alloc::Block* b = alloc_->lookup(p)) return unit_of(b);
  return alloc_->owns(p) ? p : 0;
}

// A block a table points to may have been freed since the table was
// looked at (a free drops it from every table, but may race with this).
void Engine::add_live(PointerTables::Unit target, BlockList& out) noexcept {
  auto* b = reinterpret_cast<alloc::Block*>(target);
  if (b->st() != alloc::State::Freed) out.add(b);
}

void Engine::note_host_words(CUdeviceptr dst, const void* src, std::size_t bytes) noexcept {
  const PointerTables::Unit unit = unit_of(dst);
  if (!unit) return;
  PointerTables::Unit targets[PointerTables::kTargets];
  std::size_t n = 0;
  bool every = false;
  CUdeviceptr lo = 0, hi = 0;
  // Large copies are bulk data, not tables: only what they overwrite counts.
  if (bytes <= settings_.pointer_scan_bytes && src) {
    // Words aligned in device memory, where a kernel would read them.
    const std::size_t first = (8 - (dst & 7)) & 7;
    for (std::size_t off = first; off + 8 <= bytes; off += 8) {
      CUdeviceptr word;
      std::memcpy(&word, static_cast<const unsigned char*>(src) + off, sizeof word);
      // A word into a small-allocation slot names its slab's use record.
      alloc::Block* b = word ? alloc_->use_target(word) : nullptr;
      if (!b || b->st() == alloc::State::Freed) continue;
      if (!lo) lo = dst + off;
      hi = dst + off + 8;
      if (std::find(targets, targets + n, unit_of(b)) != targets + n) continue;
      if (n == PointerTables::kTargets) every = true;
      else targets[n++] = unit_of(b);
    }
  }
  pointers_.wrote(unit, dst, dst + bytes, {targets, n}, lo, hi, every);
}

void Engine::note_device_copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) noexcept {
  if (pointers_.empty()) return;
  const PointerTables::Unit dst_unit = unit_of(dst), src_unit = unit_of(src);
  if (!dst_unit) return;
  // From memory tierrt does not track nothing is known: what was found stays.
  if (src_unit) pointers_.copied(src_unit, src, src + bytes, dst_unit, dst);
}

void Engine::note_unified_copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) noexcept {
  if (!unit_of(dst)) return;
  if (unit_of(src)) return note_device_copy(dst, src, bytes);
  if (bytes > settings_.pointer_scan_bytes) return note_host_words(dst, nullptr, bytes);
  // Read it only where it is host memory: pageable (unknown to the driver)
  // or pinned.
  unsigned type = 0;
  const CUresult r = TIERRT_CU(cuPointerGetAttribute, &type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, src);
  if (r == CUDA_ERROR_INVALID_VALUE || (r == CUDA_SUCCESS && type == CU_MEMORYTYPE_HOST))
    note_host_words(dst, reinterpret_cast<const void*>(src), bytes);
}

namespace {

// Errors the driver may report from any call (an earlier kernel's sticky
// fault) or from any call on a capturing stream: the application's own.
bool reported_by_any_call(CUresult r) noexcept {
  return r == CUDA_ERROR_INVALID_VALUE || (r >= CUDA_ERROR_ILLEGAL_ADDRESS && r <= CUDA_ERROR_LAUNCH_FAILED) ||
         (r >= CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && r <= CUDA_ERROR_CAPTURED_EVENT);
}

}  // namespace

CUresult Engine::before_use(BlockList& blocks, CUstream key, CUresult refusal, bool brief) noexcept {
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  blocks.set_announced(false);
  if (!blocks.incomplete()) {
    bool announced = false;
    if (brief) r = alloc_->ensure_resident_briefly(blocks.span(), key, &announced);
    else r = alloc_->ensure_resident(blocks.span(), key);
    blocks.set_announced(announced);
    // Freed since it was named (another thread's free): ignored, as a word
    // into freed memory is.
    while (r == CUDA_ERROR_INVALID_VALUE && blocks.drop_freed()) r = alloc_->ensure_resident(blocks.span(), key);
  }
  return r == CUDA_SUCCESS || refusal == CUDA_SUCCESS || reported_by_any_call(r) ? r : refusal;
}

void Engine::after_use(const BlockList& blocks, CUstream key, bool capturing, bool enqueued) noexcept {
  const bool several = count() > 1;
  // Another device's legacy or per-thread stream cannot be named from the
  // allocator's threads (there it would be their context's own): the work
  // is waited for here, on the thread whose context it is.
  if (enqueued && !capturing && several && !drv::names_a_stream(key) && !on_engine_context())
    (void)TIERRT_CU(cuStreamSynchronize, key);
  if (enqueued) {
    const bool lazy = !capturing && may_record_lazily(blocks, key, several);
    alloc_->record_use(blocks.span(), key, capturing, lazy);
  }
  alloc_->release(blocks.span(), blocks.announced(), blocks.any_slab());
}

// A lazy use costs no event now; a wait on it may include the stream's later
// work (up to the use-event window of the host's launches, which may be many
// kernels on the device when the host runs ahead), unless it is settled
// earlier. So only where some thread of ours may record on the stream, and
// only when every block named is one whose move is never timed to its last
// use: a small allocation's slab, a block never spilled, or one the policy
// found persistent (weights, optimizer state) or workspace; and every block
// of any class while no spill was ever asked for (a job that fits on the
// device pays no event per launch; the first spill's wait may include up to
// a window of later work). An activation or a block not yet classified,
// once spills began, and a granule group's member always, records at once.
bool Engine::may_record_lazily(const BlockList& blocks, CUstream key, bool several_engines) const noexcept {
  if (!drv::names_a_stream(key) && !(key == CU_STREAM_LEGACY && (!several_engines || on_engine_context())))
    return false;
  constexpr std::uint8_t kPersistent = 1 + static_cast<std::uint8_t>(policy::LifetimeClass::Persistent);
  constexpr std::uint8_t kWorkspace = 1 + static_cast<std::uint8_t>(policy::LifetimeClass::Workspace);
  constexpr std::uint32_t kNeverTimed = (1u << kPersistent) | (1u << kWorkspace);
  assert(blocks.notes_cover_blocks());
  if (blocks.any_group()) return false;
  return !alloc_->spill_asked() || (blocks.spillable_classes() & ~kNeverTimed) == 0;
}

void Engine::note_launch(const BlockList& blocks, CUstream key, bool capturing) noexcept {
  const std::uint64_t seq = launches_.fetch_add(1, std::memory_order_relaxed);
  if (!recorder_ && !policy_) return;
  const policy::StreamId sid = streams_.id(key);
  auto tell = [&](std::span<alloc::Block* const> named) {
    if (recorder_ && recorder_->events_on()) recorder_->launch(seq, sid, named);
    if (!policy_) return;
    // Under capture, timing the launch would put the clock's event into the graph.
    policy_->post_launch(seq, sid, key, !capturing, named);
    // Prefetches armed for this launch go out from this thread, where the
    // engine's context is current (the mover's streams are its own), and
    // while no capture is open: a fetch's host waits fall back to calls a
    // capture of this thread's prohibits (cuCtxSynchronize), which would
    // invalidate it (the policy thread tries them instead).
    if (policy_->prefetch_due(seq) && !captures_.any_active() && (count() == 1 || on_engine_context()))
      policy_->run_due(seq);
  };
  // The planner and the recording know blocks only, not slabs' use records
  // (the list without them is made only where there are some).
  const std::span<alloc::Block* const> named = blocks.span();
  if (!blocks.any_slab()) {
    tell(named);
  } else {
    BlockList without_slabs;
    for (alloc::Block* b : named)
      if (!b->slab) without_slabs.add(b);
    tell(without_slabs.span());
  }
  // Residency over time, every 256 launches: enough to draw, cheap to keep.
  if ((seq & 255) == 0) sample(SampleKind::Launches, sid, 0);
}

}  // namespace tierrt
