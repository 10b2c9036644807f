// The engine's graph and capture use cases: what a capture and a graph name,
// made resident at each graph launch; captured frees; moves held while a
// global-mode capture is open.
#include <new>

#include "driver/driver.h"
#include "runtime/engine.h"

namespace tierrt {

namespace {

// What `blocks` names, as addresses a launch looks up again: each block's
// base, and each small-allocation slot named (a slab's use record has no
// address of its own; the slot's address finds the slab and any pointer
// table the slot holds).
GraphRegistry::Addresses addresses_of(const BlockList& blocks) {
  GraphRegistry::Addresses out;
  out.reserve(blocks.span().size() + blocks.slots().size());
  for (const alloc::Block* b : blocks.span())
    if (!b->slab) out.push_back(b->va);
  out.insert(out.end(), blocks.slots().begin(), blocks.slots().end());
  return out;
}

// The first and last byte one side of a 3D copy touches, when it is device
// memory; bytes 0 otherwise.
AddressRange copy_side(CUmemorytype type, CUdeviceptr base, std::size_t x, std::size_t y, std::size_t z,
                       std::size_t pitch, std::size_t height, const CUDA_MEMCPY3D& p) {
  if ((type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) || base == 0 || p.WidthInBytes == 0)
    return {};
  const std::size_t rows = p.Height ? p.Height : 1, slices = p.Depth ? p.Depth : 1;
  const CUdeviceptr first = base + x + (y + z * height) * pitch;
  const std::size_t span = ((slices - 1) * height + (rows - 1)) * pitch + p.WidthInBytes;
  return {first, span};
}

}  // namespace

void Engine::hold_for_discovered_capture(void* engine) noexcept {
  static_cast<Engine*>(engine)->hold_for_capture();
}

bool Engine::capture_began(CUstream s, CUstreamCaptureMode mode) noexcept {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (TIERRT_CU(cuStreamGetCaptureInfo, s, &status, &id, nullptr, nullptr, nullptr, nullptr) != CUDA_SUCCESS ||
      id == 0) {
    // The driver would not name it: a name of tierrt's own, never one of the
    // driver's (which count up from 1).
    static std::atomic<std::uint64_t> next{0};
    id = (1ull << 63) | next.fetch_add(1, std::memory_order_relaxed);
  }
  return captures_.begin(s, mode, id);
}

std::uint64_t Engine::capture_of(CUstream s) noexcept {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  // The driver's id names the capture even when tierrt met only a stream
  // joined to it, never its origin.
  if (TIERRT_CU(cuStreamGetCaptureInfo, s, &status, &id, nullptr, nullptr, nullptr, nullptr) == CUDA_SUCCESS &&
      status != CU_STREAM_CAPTURE_STATUS_NONE && id != 0)
    return id;
  return captures_.capture_id(s);
}

void Engine::capture_ended(CUstream s, std::uint64_t id, CUgraph graph) noexcept {
  // The capture is over once the driver says so, whatever cuStreamEndCapture
  // returned (it ends an invalidated capture too; on the wrong thread or
  // stream it ends nothing). Every stream joined to it ends with it.
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (id == 0 ||
      (TIERRT_CU(cuStreamGetCaptureInfo, s, &status, nullptr, nullptr, nullptr, nullptr, nullptr) == CUDA_SUCCESS &&
       status != CU_STREAM_CAPTURE_STATUS_NONE))
    return;
  const CaptureTracker::Ended ended = captures_.end(id);
  if (ended.id != 0) {
    try {
      graphs_.capture_ended(ended.id, graph);
    } catch (const std::bad_alloc&) {
      // Out of host memory: what the capture named is lost, and the graph's
      // launches make nothing resident.
    }
  }
  if (ended.global) resume_after_capture();
}

void Engine::note_captured(const BlockList& blocks, CUstream stream, bool known) noexcept {
  if (blocks.empty() && known) return;
  const std::uint64_t id = captures_.capture_id(stream);
  if (id == 0) return pin_for_good(blocks, stream);
  // The node the work became, when the driver says (the capture's one
  // dependency right after it), so that a later change of its parameters
  // replaces what it names.
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUgraphNode* deps = nullptr;
  std::size_t ndeps = 0;
  CUgraphNode node = nullptr;
  if (TIERRT_CU(cuStreamGetCaptureInfo, stream, &status, nullptr, nullptr, &deps, nullptr, &ndeps) == CUDA_SUCCESS &&
      ndeps == 1 && deps != nullptr)
    node = deps[0];
  try {
    graphs_.captured(id, node, addresses_of(blocks), known && !blocks.incomplete());
  } catch (const std::bad_alloc&) {
    pin_for_good(blocks, stream);
  }
}

void Engine::pin_for_good(const BlockList& blocks, CUstream stream) noexcept {
  if (!blocks.empty()) (void)alloc_->record_use(blocks.span(), StreamIds::key(stream), /*capturing=*/true);
}

bool Engine::free_captured(CUdeviceptr ptr, CUstream stream) noexcept {
  const std::uint64_t id = captures_.capture_id(stream);
  if (id == 0 || !alloc_->owns(ptr)) return false;
  // The driver cannot free tierrt's memory in a graph: the graph's first
  // launch frees it, after its work, on its stream. Until then the block is
  // the graph's and no allocation is given its memory.
  try {
    graphs_.captured_free(id, ptr);
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

bool Engine::collect_graph(CUgraphExec exec, BlockList& out) noexcept {
  const std::shared_ptr<const GraphRegistry::Named> named = graphs_.named(exec);
  if (!named) return false;
  // Looked up as a launch's parameter words are: a freed block names
  // nothing, a slot names its slab, and the pointer tables are read as they
  // are now (the graph's kernels read them when they run, not when captured).
  bool known = true;
  for (CUdeviceptr a : named->blocks) known &= collect_word(a, out);
  if (!known || !add_pointed_to(out)) name_every_block(out);
  return named->unknown;
}

void Engine::graph_launched(CUgraphExec exec, const BlockList& blocks, CUstream stream, bool unknown,
                            bool enqueued) noexcept {
  if (!blocks.empty()) {
    if (enqueued && unknown) pin_for_good(blocks, stream);
    after_use(blocks, StreamIds::key(stream), false, enqueued);
  }
  if (!enqueued) return;
  try {
    for (CUdeviceptr p : graphs_.take_frees(exec)) {
      CUresult r = CUDA_SUCCESS;
      (void)free_tracked(p, stream, &r);
    }
  } catch (const std::bad_alloc&) {
    // The frees stay pending: the block is kept, as if the graph had not run.
  }
  note_launch(blocks, StreamIds::key(stream), false);
}

void Engine::graph_instantiated(CUgraph graph, CUgraphExec exec) noexcept {
  try {
    graphs_.instantiated(graph, exec);
  } catch (const std::bad_alloc&) {
    graphs_.exec_destroyed(exec);
  }
}

void Engine::graph_kernel_node(CUgraph graph, CUgraphNode node, CUgraphExec exec,
                               const CUDA_KERNEL_NODE_PARAMS* p) noexcept {
  // A library kernel stands in for the function when no function is given.
  CUfunction f = p->func ? p->func : reinterpret_cast<CUfunction>(p->kern);
  BlockList blocks;
  const bool known = collect_launch(f, p->kernelParams, p->extra, blocks) && add_pointed_to(blocks) &&
                     !blocks.incomplete();
  try {
    const GraphRegistry::Addresses a = addresses_of(blocks);
    if (exec) graphs_.exec_node_set(exec, node, a, known);
    else if (graph) graphs_.node_set(graph, node, a, known);
    else graphs_.node_set(node, a, known);
  } catch (const std::bad_alloc&) {
    pin_for_good(blocks, CU_STREAM_LEGACY);
  }
}

void Engine::graph_memcpy_node(CUgraph graph, CUgraphNode node, const CUDA_MEMCPY3D& p) noexcept {
  BlockList blocks;
  bool known = collect_range(
      copy_side(p.srcMemoryType, p.srcDevice, p.srcXInBytes, p.srcY, p.srcZ, p.srcPitch, p.srcHeight, p), blocks);
  known &= collect_range(
      copy_side(p.dstMemoryType, p.dstDevice, p.dstXInBytes, p.dstY, p.dstZ, p.dstPitch, p.dstHeight, p), blocks);
  known &= add_pointed_to(blocks);
  try {
    graphs_.node_set(graph, node, addresses_of(blocks), known && !blocks.incomplete());
  } catch (const std::bad_alloc&) {
    pin_for_good(blocks, CU_STREAM_LEGACY);
  }
}

void Engine::graph_memset_node(CUgraph graph, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS& p) noexcept {
  BlockList blocks;
  bool known = true;
  if (p.width != 0 && p.elementSize != 0) {
    const std::size_t rows = p.height ? p.height : 1;
    known = collect_range({p.dst, (rows - 1) * p.pitch + p.width * p.elementSize}, blocks) && add_pointed_to(blocks);
  }
  try {
    graphs_.node_set(graph, node, addresses_of(blocks), known && !blocks.incomplete());
  } catch (const std::bad_alloc&) {
    pin_for_good(blocks, CU_STREAM_LEGACY);
  }
}

void Engine::graph_forget(CUgraph graph, CUgraphExec exec) noexcept {
  if (graph) graphs_.graph_destroyed(graph);
  if (exec) graphs_.exec_destroyed(exec);
}

}  // namespace tierrt
