// The rescue: gives device memory back when a reservation does not fit.
// First what costs no copy (spare chunks, cached freed blocks), then spills
// of the coldest idle blocks. When every candidate is busy for now it waits
// for what may change that (a move finishing, launch pins released, an
// allocation or fetch in progress on another thread, a trim releasing
// memory) and gives up only when nothing can: no wall-clock limit decides.
// Giving up is not failing: the claimant then passes the budget while the
// driver grants the memory (DeviceArena::reserve).
#include <algorithm>
#include <optional>
#include <vector>

#include "launch_announcements.h"
#include "parts.h"
#include "driver/driver.h"

namespace tierrt::alloc {

bool Allocator::Parts::make_room(std::uint64_t bytes, const Claimant& who) noexcept {
  const BlockStates::Rescuing rescuing(blocks);  // before looking at any pin
  const std::uint64_t freed = trim(bytes) + release_empty_slabs();
  if (freed >= bytes || !who.may_spill) return freed > 0;
  std::vector<Block*> held;
  if (spill_coldest(bytes - freed, &held)) {
    blocks.wait_spills_done();  // their device memory is released by then
    return true;
  }
  if (freed > 0) return true;
  auto l = blocks.lock();
  return blocks.wait_for_change(rescuing.seen(), l, who.pinned, who.holds_claim, held);
}

void Allocator::Parts::over_budget(std::uint64_t used, std::uint64_t limit) noexcept {
  if (told_over_budget.exchange(true, std::memory_order_relaxed)) return;  // once
  if (MoveObserver* o = mover->observer()) o->over_budget(used, limit);
}

bool Allocator::Parts::spill_coldest(std::uint64_t bytes, std::vector<Block*>* held) noexcept {
  struct Candidate {
    Block* b;
    std::uint64_t last_use, mapped;
  };
  std::vector<Candidate> idle;
  {
    auto l = blocks.lock();
    // Pins only: the launch announcements are looked at by each spill's
    // claim (a candidate announced now comes back busy), not once per
    // resident block here.
    blocks.for_each_resident(
        [&](Block* b) {
          if (b->captured || b->user_pins != 0 || b->ops_pending != 0 || b->ready.load() != nullptr) return;
          if (b->pins.load() != 0) {
            held->push_back(b);
            return;
          }
          idle.push_back({b, b->last_use.load(std::memory_order_relaxed), b->mapped});
        },
        l);
  }
  std::sort(idle.begin(), idle.end(), [](const Candidate& x, const Candidate& y) { return x.last_use < y.last_use; });
  std::uint64_t started = 0;
  for (const Candidate& c : idle) {
    if (started >= bytes) break;
    bool launch_held = false;
    const SpillResult r = mover->spill(c.b, &launch_held);
    if (launch_held) held->push_back(c.b);
    if (r == SpillResult::Started) started += c.mapped;
    if (r == SpillResult::HostFull) break;
  }
  return started > 0;
}

std::uint64_t Allocator::Parts::trim(std::uint64_t bytes) noexcept {
  std::uint64_t sum = arena.release_spares(bytes);  // nothing uses them
  if (sum < bytes) sum += release_parked(bytes - sum);  // nor these (a freed group's, kept)
  std::vector<Block*> victims;
  std::optional<BlockStates::Claim> releasing;  // other rescues wait for this memory
  if (sum < bytes) {
    auto l = blocks.lock();
    sum += blocks.take_cached(bytes - sum, [&](Block* b) { victims.push_back(b); }, l);
    if (!victims.empty()) releasing.emplace(blocks, l);
  }
  if (victims.empty()) {
    trimmed.fetch_add(sum, std::memory_order_relaxed);
    return sum;
  }
  // Work that used them finishes before their memory is unmapped: each
  // block's recorded uses are waited for, and only those (every access
  // tierrt knows of is a recorded use, as a spill assumes). Not a context
  // synchronize: the application's work queued behind them (a backward pass
  // enqueued far ahead of the device) keeps running, and the memory is
  // taken as soon as its last user is done. A block whose uses cannot be
  // waited for now (a use on a capturing stream) goes back to the cache.
  std::vector<Block*> kept;
  for (Block* b : victims) {
    bool idle = uses.wait_all(b) == CUDA_SUCCESS;
    if (idle) {
      // Anything recorded on it while the host waited is waited for too.
      idle = uses.forget(b, /*synchronize=*/true) == CUDA_SUCCESS;
      // A launch that pinned it before the application freed it (another
      // thread's free; the launch names it through a stale word) may still
      // be enqueuing, and records its use after: the block stays cached
      // until that launch let go of it and its use is over. No pin or use
      // can come after this check: the block is FREED, so a launch naming
      // it now drops it.
      auto l = blocks.lock();
      idle = idle && b->ops_pending == 0 && b->ready.load() == nullptr &&
             !held_by_launch(b) && uses.recorded(b) == 0;
    }
    if (!idle) {
      kept.push_back(b);
      sum -= b->mapped;
      continue;
    }
    destroy_block(b);
  }
  if (!kept.empty()) {
    auto l = blocks.lock();
    for (Block* b : kept) blocks.return_cached(b, l);
  }
  trimmed.fetch_add(sum, std::memory_order_relaxed);
  return sum;
}

}  // namespace tierrt::alloc
