// What a copy, memset or stream memory operation names: every block its
// bytes overlap, found by walking the range one block (or, where no block
// is, one granule) at a time, so a range costs a lookup per region it
// crosses rather than per byte or per row.
#include <limits>

#include "runtime/engine.h"

namespace tierrt {

namespace {

// a * b, or false when it does not fit.
bool times(std::size_t a, std::size_t b, std::size_t* out) noexcept { return !__builtin_mul_overflow(a, b, out); }

}  // namespace

CUdeviceptr Engine::collect_span(CUdeviceptr ptr, std::size_t bytes, BlockList& out) noexcept {
  constexpr CUdeviceptr kTop = std::numeric_limits<CUdeviceptr>::max();
  const CUdeviceptr end = bytes > kTop - ptr ? kTop : ptr + bytes;
  const CUdeviceptr granule = alloc_->granularity();
  CUdeviceptr at = ptr;
  while (at < end) {
    CUdeviceptr next;
    if (alloc::Block* b = alloc_->lookup(at)) {
      // Freed memory is named by no correct program's copy; a granule
      // group's member never used yet is mapped by this first use.
      if (usable(b)) out.add(b);
      next = b->va + b->mapped;
    } else if (alloc::Block* slab = alloc_->use_target(at)) {
      // Small-allocation slots: their slab's use record takes the use.
      out.add(slab);
      out.add_slot(at);
      next = (at / granule + 1) * granule;
    } else {
      next = (at / granule + 1) * granule;
    }
    if (next <= at) return kTop;  // the top of the address space
    at = next;
  }
  return at;
}

bool Engine::collect_range(AddressRange range, BlockList& out) noexcept {
  if (!range.ptr || !range.bytes) return true;
  collect_span(range.ptr, range.bytes, out);
  // A small-allocation slot is no block, but may hold a pointer table. A
  // block is named already (a granule group's members exactly as the range
  // overlaps them: no extent, no boundary learned).
  auto slot_at = [&](CUdeviceptr p) { return alloc_->lookup(p) != nullptr || collect_word(p, out); };
  bool known = slot_at(range.ptr);
  if (range.bytes > 1) known &= slot_at(range.ptr + range.bytes - 1);
  return known;
}

void Engine::collect_strided(const StridedRange& r, BlockList& out) noexcept {
  if (r.empty()) return;
  // The extent of one slice, and of them all; where rows or slices overlap
  // (a pitch below the width) they are read as one span.
  std::size_t slice = r.width, all = 0;
  if (r.rows > 1) {
    if (!times(r.rows - 1, r.pitch, &slice) || __builtin_add_overflow(slice, r.width, &slice)) return;
  }
  if (r.slices > 1) {
    if (!times(r.slices - 1, r.slice_pitch, &all) || __builtin_add_overflow(all, slice, &all)) return;
  }
  if (r.slices > 1 && r.slice_pitch < slice) return (void)collect_span(r.ptr, all, out);
  const bool rows_apart = r.rows > 1 && r.pitch >= r.width;
  for (std::size_t z = 0; z < r.slices;) {
    const CUdeviceptr slice_start = r.ptr + z * r.slice_pitch;
    CUdeviceptr covered = slice_start;
    if (!rows_apart) {
      covered = collect_span(slice_start, slice, out);
    } else {
      for (std::size_t y = 0; y < r.rows;) {
        const CUdeviceptr row = slice_start + y * r.pitch;
        covered = collect_span(row, r.width, out);
        // Rows after this one that end by `covered` lie in the region its
        // end was found in: nothing more to name there.
        y += 1 + (covered - row - r.width) / r.pitch;
      }
    }
    // The same for whole slices.
    z += 1 + (r.slices > 1 ? (covered - slice_start - slice) / r.slice_pitch : 0);
  }
}

}  // namespace tierrt
