// NCCL's host API: each collective names its buffers and stream, and a
// group's work is enqueued when the outermost ncclGroupEnd returns, so the
// uses of the calls inside a group are recorded there, their blocks pinned
// until then.
#include <algorithm>
#include <utility>
#include <vector>

#include "runtime/engine.h"

namespace tierrt {

namespace {

// The calling thread's open NCCL group: its depth, and each block a call
// inside it named with that call's engine and stream (one pin each).
struct GroupUse {
  Engine* engine;
  CUstream stream;
  alloc::Block* block;
};
struct NcclGroup {
  int depth = 0;
  std::vector<GroupUse> uses;
  std::vector<alloc::Block*> run;  // one engine's blocks on one stream, when the group ends
};

thread_local NcclGroup t_group;

}  // namespace

bool Engine::nccl_grouped() noexcept { return t_group.depth > 0; }

bool Engine::reserve_group(std::size_t n) noexcept {
  try {
    t_group.uses.reserve(t_group.uses.size() + n);
    t_group.run.reserve(t_group.uses.size() + n);
    return true;
  } catch (...) {
    return false;
  }
}

void Engine::defer_to_group_end(const BlockList& blocks, CUstream stream) noexcept {
  for (alloc::Block* b : blocks.span()) t_group.uses.push_back({this, stream, b});  // reserved: does not throw
}

void Engine::nccl_group_start() noexcept { ++t_group.depth; }

void Engine::nccl_group_end(bool went_out) noexcept {
  if (t_group.depth == 0 || --t_group.depth > 0) return;
  // Every engine a call of the group named (each deferred its own blocks).
  while (!t_group.uses.empty()) t_group.uses.front().engine->end_group_uses(went_out);
}

void Engine::end_group_uses(bool went_out) noexcept {
  auto& uses = t_group.uses;
  // This engine's uses first, by stream; the other engines' stay after them.
  const auto mine = std::stable_partition(uses.begin(), uses.end(), [this](const GroupUse& u) { return u.engine == this; });
  std::stable_sort(uses.begin(), mine, [](const GroupUse& a, const GroupUse& b) { return a.stream < b.stream; });
  for (auto i = uses.begin(); i != mine;) {
    t_group.run.clear();
    const CUstream stream = i->stream;
    for (; i != mine && i->stream == stream; ++i) t_group.run.push_back(i->block);
    if (went_out) alloc_->record_use(t_group.run, stream, captures_.capturing(stream));
    alloc_->release(t_group.run);
  }
  uses.erase(uses.begin(), mine);
}

void Engine::nccl_register(CUdeviceptr ptr, std::size_t bytes, void* handle) noexcept {
  BlockList blocks;
  if (!collect_range({ptr, bytes}, blocks) || blocks.empty() || blocks.incomplete()) return;
  std::vector<PinnedForNccl> pins;
  try {
    pins.reserve(blocks.span().size());
  } catch (...) {
    return;
  }
  for (alloc::Block* b : blocks.span()) {
    AllocationRecord rec;
    if (!records_.find(b->va, &rec) || alloc_->pin(b, CU_STREAM_LEGACY) != CUDA_SUCCESS) continue;
    pins.push_back({b, rec.buffer_id});
  }
  if (nccl_registrations_.add(handle, pins)) return;
  for (const PinnedForNccl& p : pins) alloc_->unpin(p.block);
}

void Engine::nccl_deregister(void* handle) noexcept {
  for (const PinnedForNccl& p : nccl_registrations_.take(handle)) {
    // A block freed since (which ended its pins) may hold another allocation now.
    AllocationRecord rec;
    if (records_.find(p.block->va, &rec) && rec.buffer_id == p.buffer_id) alloc_->unpin(p.block);
  }
}

}  // namespace tierrt
