// The engine's launch path: what a launch, copy or memset names, made
// resident around the forwarded call, then counted and told to the planner
// and the recording.
#include <cstring>

#include "runtime/engine.h"

namespace tierrt {

void Engine::collect_launch(CUfunction f, void** params, void** extra, BlockList& out) noexcept {
  auto scan_word = [&](const unsigned char* p) {
    CUdeviceptr word;
    std::memcpy(&word, p, sizeof word);
    if (word)
      if (alloc::Block* b = alloc_->lookup(word)) out.add(b);
  };
  if (params) {
    ParamLayout layout = layouts_.get(f);
    for (std::uint32_t i = 0; i < layout.count; ++i) {
      if (!params[i]) continue;
      const std::uint32_t off = layout.offsets[i], size = layout.sizes[i];
      // Words aligned in the parameter buffer, read from this parameter's copy.
      for (std::uint32_t w = (off + 7) & ~7u; w + 8 <= off + size; w += 8)
        scan_word(static_cast<const unsigned char*>(params[i]) + (w - off));
    }
    return;
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
}

CUresult Engine::before_use(const BlockList& blocks, CUstream stream) noexcept {
  if (blocks.incomplete()) return CUDA_ERROR_OUT_OF_MEMORY;
  return alloc_->ensure_resident(blocks.span(), stream);
}

void Engine::after_use(const BlockList& blocks, CUstream stream, bool enqueued) noexcept {
  if (enqueued) alloc_->record_use(blocks.span(), stream, captures_.capturing(stream));
  alloc_->release(blocks.span());
}

void Engine::note_launch(const BlockList& blocks, CUstream stream) noexcept {
  const std::uint64_t seq = launches_.fetch_add(1, std::memory_order_relaxed);
  if (!recorder_ && !policy_) return;
  const policy::StreamId sid = streams_.id(stream);
  if (recorder_ && recorder_->events_on()) recorder_->launch(seq, sid, blocks.span());
  if (policy_) {
    // Under capture, timing the launch would put the clock's event into the graph.
    policy_->post_launch(seq, sid, stream, !captures_.capturing(stream));
    for (alloc::Block* b : blocks.span()) policy_->post(policy::Event::use(b->va, seq, sid));
  }
  // Residency over time, every 256 launches: enough to draw, cheap to keep.
  if ((seq & 255) == 0) sample(SampleKind::Launches, 0, 0);
}

}  // namespace tierrt
