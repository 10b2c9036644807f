// The engine: what the hooks talk to, in use cases. It owns the allocator
// for the device of the context current when tierrt first sees an
// allocation, turns launches, copies and memsets into residency requests,
// feeds the planner and the recording, and keeps the counters the stats show.
//
// Each use case that stands in for a driver call takes the forwarding call
// (the driver's own function, bound to the caller's arguments) as a callable
// and makes it at most once; when the call concerns nothing tierrt tracks,
// forwarding is all that happens.
//
// Hot paths (launch, access): no allocation, no logging, no lock held across
// a driver call; a launch that names no tracked block costs a table probe and
// one O(1) lookup per 8-byte parameter word.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>

#include "allocator/ranked_mutex.h"
#include "runtime/lock_rank.h"
#include "allocator/allocator.h"
#include "allocator/capture_gate.h"
#include "runtime/allocation_records.h"
#include "runtime/block_list.h"
#include "runtime/capture_tracker.h"
#include "runtime/graph_registry.h"
#include "runtime/copy_shapes.h"
#include "runtime/move_feedback.h"
#include "runtime/nccl_registrations.h"
#include "runtime/param_layouts.h"
#include "runtime/pointer_tables.h"
#include "runtime/policy_thread.h"
#include "runtime/recorder.h"
#include "runtime/run_monitor.h"
#include "runtime/settings.h"
#include "runtime/stream_ids.h"
#include "tierrt/tierrt.h"

namespace tierrt {

// Device memory a copy or memset touches.
struct AddressRange {
  CUdeviceptr ptr = 0;
  std::size_t bytes = 0;
};

class Engine {
 public:
  // The process runs one engine per device it allocates on (an engine binds
  // to the first context it sees on its device); engines live until exit.
  static constexpr int kMaxEngines = 64;
  // The first engine started, or null (off, not started yet, or failed to start).
  static Engine* active() noexcept { return g_engines[0].load(std::memory_order_acquire); }
  // How many engines run, and the i-th (i below count()) in the order they started.
  static int count() noexcept { return g_count.load(std::memory_order_acquire); }
  static Engine* at(int i) noexcept { return g_engines[i].load(std::memory_order_acquire); }
  // The engine when exactly one runs (the hot paths' common case).
  static Engine* sole() noexcept { return count() == 1 ? active() : nullptr; }
  // The engine whose memory holds `p` (live or not), or null.
  static Engine* owning(CUdeviceptr p) noexcept;
  // The engine of the calling thread's current context, or null (none
  // started on it). One driver call.
  static Engine* current() noexcept;
  // Starts the engine for the current context's device unless tierrt is
  // off or one runs there; returns that device's engine or null (no
  // context: the first engine). Safe from any thread; only the first call
  // reads the environment.
  static Engine* start() noexcept;
  // The engine an allocation on the calling thread goes to: started on first
  // use, and only when the current context is the engine's; else null.
  static Engine* for_allocation() noexcept;
  // Makes a context of device `ordinal` current unless the current one is on
  // it already (PyTorch's allocator calls name the device, not a context).
  static bool make_device_current(int ordinal) noexcept;
  // The current context was given access to `peer`'s memory
  // (cuCtxEnablePeerAccess succeeded): the engine of `peer`'s device, now
  // or once it starts, maps its memory for the current context's device too.
  static void peer_access_enabled(CUcontext peer) noexcept;
  // An engine of its own for `s` on the current context, not the process's
  // running one (which start() makes): null when the allocator could not start.
  // `shared_host`, when given, names the host share the engine's spills
  // hold their bytes in (the process's engines share one host budget);
  // else the node ledger's, if any.
  using SharedHost = alloc::HostShare* (*)(const Settings& s, std::uint64_t host_budget);
  static std::unique_ptr<Engine> create(const Settings& s, CUresult* err, SharedHost shared_host = nullptr) noexcept;
  ~Engine();

  const Settings& settings() const noexcept { return settings_; }
  CUcontext context() const noexcept { return ctx_; }
  int device_ordinal() const noexcept { return device_ordinal_; }
  // Another device may reach this engine's memory (peer access granted).
  bool reachable_by_peers() const noexcept { return peers_granted_.load(std::memory_order_acquire); }

  // Allocation: like cuMemAllocAsync on `stream`.
  CUresult allocate(CUdeviceptr* out, std::size_t bytes, CUstream stream) noexcept;
  // Allocations from `pool` are tiered: it is the default pool of the
  // engine's device (what plain cuMemAllocAsync uses). An application's own
  // pool keeps its memory (it may be exportable, or have its own release
  // threshold).
  bool tiers_pool(CUmemoryPool pool) const noexcept { return pool && pool == default_pool_; }

  // Frees: cuMemFree (ordered after the legacy stream's work) and
  // cuMemFreeAsync on `stream`; a pointer tierrt did not hand out is forwarded.
  template <class Forward>
  CUresult free(CUdeviceptr ptr, Forward&& forward) noexcept {
    return free_async(ptr, CU_STREAM_LEGACY, forward);
  }
  template <class Forward>
  CUresult free_async(CUdeviceptr ptr, CUstream stream, Forward&& forward) noexcept {
    if (captures_.capturing(stream) && free_captured(ptr, stream)) return CUDA_SUCCESS;
    CUresult r;
    return free_tracked(ptr, stream, &r) ? r : forward();
  }

  // A kernel launch on `stream` with cuLaunchKernel's params or extra: the
  // tracked blocks any 8-byte-aligned parameter word points into (and those
  // the tables they hold point to) are resident for the stream when the
  // launch goes out, and their use is recorded. A word into freed memory, or
  // into nothing, is ignored. A function whose layout the driver would not
  // give names every block.
  template <class Forward>
  CUresult launch(CUfunction f, CUstream stream, void** params, void** extra, Forward&& forward) noexcept {
    const CUstream key = StreamIds::key(stream);
    const bool capturing = captures_.capturing(stream);
    BlockList blocks;
    if (!collect_launch(f, params, extra, blocks) || !add_pointed_to(blocks)) name_every_block(blocks);
    const CUresult r = use(blocks, key, capturing, forward, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    if (r == CUDA_SUCCESS) note_launch(blocks, key, capturing);
    return r;
  }
  // A launch on another device's stream (the current context is not the
  // engine's) whose kernel reaches this engine's memory through peer
  // access: the blocks it names are resident and their use recorded on
  // that stream, as for a launch of its own; it is not counted, and the
  // planner does not see it (it belongs to the other device's step).
  template <class Forward>
  CUresult peer_launch(CUfunction f, CUstream stream, void** params, void** extra, Forward&& forward) noexcept {
    BlockList blocks;
    if (!collect_launch(f, params, extra, blocks) || !add_pointed_to(blocks)) name_every_block(blocks);
    return use(blocks, StreamIds::key(stream), captures_.capturing(stream), forward,
               CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  }
  // A copy or memset on `stream` touching `ranges`: like a launch, uncounted.
  template <class Forward>
  CUresult access(std::initializer_list<AddressRange> ranges, CUstream stream, Forward&& forward) noexcept {
    BlockList blocks;
    bool known = true;
    for (const AddressRange& r : ranges) known &= collect_range(r, blocks);
    if (!known || !add_pointed_to(blocks)) name_every_block(blocks);
    return use(blocks, StreamIds::key(stream), captures_.capturing(stream), forward, CUDA_ERROR_INVALID_VALUE);
  }
  // A copy, memset or stream memory operation on `stream` touching
  // `range_at(i)` (a StridedRange) for each i below `count`: every block each
  // range overlaps is named, as access does.
  template <class RangeAt, class Forward>
  CUresult access_each(std::size_t count, RangeAt&& range_at, CUstream stream, Forward&& forward) noexcept {
    BlockList blocks;
    for (std::size_t i = 0; i < count; ++i) collect_strided(range_at(i), blocks);
    if (!add_pointed_to(blocks)) name_every_block(blocks);
    return use(blocks, StreamIds::key(stream), captures_.capturing(stream), forward, CUDA_ERROR_INVALID_VALUE);
  }
  // A host-to-device copy of `bytes` from host `src` to `dst`: an access;
  // once it went out, a copy of at most TIERRT_POINTER_SCAN_BYTES is read
  // for words that point into blocks, and `dst` then holds pointers to them.
  template <class Forward>
  CUresult copy_to_device(CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream,
                          Forward&& forward) noexcept {
    const CUresult r = access({{dst, bytes}}, stream, forward);
    if (r == CUDA_SUCCESS) note_host_words(dst, src, bytes);
    return r;
  }
  // A device-to-device copy: an access; the destination then points where
  // the copied words of the source did.
  template <class Forward>
  CUresult copy_on_device(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream,
                          Forward&& forward) noexcept {
    const CUresult r = access({{dst, bytes}, {src, bytes}}, stream, forward);
    if (r == CUDA_SUCCESS) note_device_copy(dst, src, bytes);
    return r;
  }
  // cuMemcpy(Async), where the pointers say the direction: from tierrt's
  // memory as copy_on_device, from host memory as copy_to_device.
  template <class Forward>
  CUresult copy_unified(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream,
                        Forward&& forward) noexcept {
    const CUresult r = access({{dst, bytes}, {src, bytes}}, stream, forward);
    if (r == CUDA_SUCCESS) note_unified_copy(dst, src, bytes);
    return r;
  }
  // cuGraphLaunch of `exec` on `stream`: the blocks the graph names (as
  // tierrt saw it built) are resident for the stream when it goes out and
  // their use is recorded there, so they may move between launches; a graph
  // with nodes tierrt could not read keeps the blocks it names resident for
  // good. Frees the graph captured happen after it, on `stream`. It counts as
  // a launch of its stream.
  template <class Forward>
  CUresult graph_launch(CUgraphExec exec, CUstream stream, Forward&& forward) noexcept {
    BlockList blocks;
    const bool unknown = collect_graph(exec, blocks);
    if (captures_.capturing(stream)) {
      const CUresult r = forward();
      if (r == CUDA_SUCCESS) {
        note_captured(blocks, stream, !unknown);
        note_launch(blocks, StreamIds::key(stream), true);
      }
      return r;
    }
    if (CUresult r = before_use(blocks, StreamIds::key(stream), CUDA_ERROR_INVALID_VALUE)) return r;
    const CUresult r = forward();
    graph_launched(exec, blocks, stream, unknown, r == CUDA_SUCCESS);
    return r;
  }

  // Function and kernel handles as the module hooks hand them out, and
  // unloads: the parameter layouts are the process's (modules load before
  // the engine starts), so these need no running engine.
  static void note_function(CUfunction f) noexcept { ParamLayouts::process().note_handle(f, HandleKind::Function); }
  static void note_kernel(CUkernel k) noexcept { ParamLayouts::process().note_handle(k, HandleKind::Kernel); }
  static void note_unload() noexcept { ParamLayouts::process().forget_all(); }

  // NCCL's host API (runtime/engine_nccl.cpp). A collective or
  // point-to-point call on `stream` whose buffers are range_at(i) for i
  // below `count`: their blocks are resident for `stream` before NCCL sees
  // the call (its kernels reach them through a work queue no parameter scan
  // sees). `forward` makes the call and says whether its work went out (or
  // will, at the group's end). Outside a group the use is recorded at once;
  // inside one (this thread's ncclGroupStart not yet ended) the blocks stay
  // pinned and their use is recorded when the outermost group ends, where
  // NCCL enqueues the work. An error: the blocks could not be made resident
  // and nothing was forwarded.
  template <class RangeAt, class Forward>
  CUresult nccl_call(std::size_t count, RangeAt&& range_at, CUstream stream, Forward&& forward) noexcept {
    BlockList blocks;
    for (std::size_t i = 0; i < count; ++i) collect_strided(range_at(i), blocks);
    if (blocks.empty()) {
      forward();
      return CUDA_SUCCESS;
    }
    const bool grouped = nccl_grouped();
    if (grouped && !reserve_group(blocks.span().size())) return CUDA_ERROR_OUT_OF_MEMORY;
    const CUstream key = StreamIds::key(stream);
    // Pinned, not announced: inside a group the blocks stay pinned until it ends.
    if (CUresult r = before_use(blocks, key, CUDA_SUCCESS, /*brief=*/false)) return r;
    const bool went_out = forward();
    if (went_out && grouped) defer_to_group_end(blocks, key);
    else after_use(blocks, key, false, went_out);
    return CUDA_SUCCESS;
  }
  // ncclGroupStart as it succeeded, ncclGroupEnd once it returned
  // (went_out: the group's work was enqueued). Counted whether or not an
  // engine runs, so that a group opened before the engine started is one.
  static void nccl_group_start() noexcept;
  static void nccl_group_end(bool went_out) noexcept;
  // ncclCommRegister (after it succeeded) and ncclCommDeregister (before it
  // is forwarded): the registered blocks keep their device memory meanwhile.
  void nccl_register(CUdeviceptr ptr, std::size_t bytes, void* handle) noexcept;
  void nccl_deregister(void* handle) noexcept;


  // tierrt_advise: false when `ptr` is not in a live tracked block or the
  // advice could not be followed. UNPIN releases only a pin PIN took (the
  // allocator counts them apart from the pins of launches being enqueued).
  bool advise(CUdeviceptr ptr, tierrt_advice advice) noexcept;
  // Memory another process or API may now reach by its physical handle (an
  // IPC handle, an exported or retained allocation handle): the block is
  // made resident and never moves again while this allocation lives; an
  // unpin does not release it. False when `ptr` is not in a live tracked
  // block (a small allocation's slab never moves).
  bool keep_exported(CUdeviceptr ptr) noexcept;

  // cuPointerGetAttribute(s) and cuMemGetAddressRange: for memory tierrt
  // handed out, the answers the driver gives for an untiered allocation of
  // the same size, whatever the block's state (a spilled block may have
  // nothing mapped at its address; a slab slot is one of many in a driver
  // allocation). Attributes tierrt does not model, and pointers it did not
  // hand out, are the driver's.
  template <class Forward>
  CUresult pointer_attribute(void* data, CUpointer_attribute attr, CUdeviceptr p, Forward&& forward) noexcept {
    if (!data) return forward();
    switch (tracked_attribute(attr, p, data)) {
      case PointerAnswer::Answered: return CUDA_SUCCESS;
      case PointerAnswer::Invalid: return CUDA_ERROR_INVALID_VALUE;
      case PointerAnswer::Driver: break;
    }
    return forward();
  }
  template <class Forward>
  CUresult pointer_attributes(unsigned count, CUpointer_attribute* attrs, void** data, CUdeviceptr p,
                              Forward&& forward) noexcept {
    const CUresult r = forward();
    if (r == CUDA_SUCCESS && attrs && data)
      for (unsigned i = 0; i < count; ++i)
        if (data[i] && tracked_attribute(attrs[i], p, data[i]) == PointerAnswer::Invalid)
          clear_attribute(attrs[i], data[i]);
    return r;
  }
  template <class Forward>
  CUresult address_range(CUdeviceptr* base, std::size_t* size, CUdeviceptr p, Forward&& forward) noexcept {
    AllocationRecord rec;
    switch (allocation_at(p, &rec)) {
      case Allocation::Live:
        if (base) *base = rec.base;
        if (size) *size = rec.bytes;
        return CUDA_SUCCESS;
      case Allocation::Gone: return CUDA_ERROR_NOT_FOUND;
      case Allocation::NotOurs: break;
    }
    return forward();
  }

  // cuMemGetInfo: with TIERRT_VIRTUAL_MEMINFO, the device budget plus the
  // host tier, as if the device were that large.
  template <class Forward>
  CUresult mem_get_info(std::size_t* free_bytes, std::size_t* total_bytes, Forward&& forward) noexcept {
    if (!free_bytes || !total_bytes || !settings_.virtual_meminfo || !on_engine_context()) return forward();
    virtual_meminfo(free_bytes, total_bytes);
    return CUDA_SUCCESS;
  }

  // What the application says and does about its steps.
  void note_step() noexcept;
  void note_phase(int phase) noexcept;
  // A synchronisation of `stream`, or of every stream.
  void note_sync(CUstream stream, bool all_streams) noexcept;

  // Stats.
  void public_stats(tierrt_stats* out) const noexcept;
  alloc::Stats allocator_stats() const noexcept { return alloc_->stats(); }
  std::uint64_t launches() const noexcept { return launches_.load(); }
  std::uint64_t steps() const noexcept { return steps_.load(); }
  std::uint64_t peak_live_bytes() const noexcept { return peak_live_bytes_.load(); }
  const PolicyThread* planner() const noexcept { return policy_.get(); }
  PolicyThread* planner_for_tests() noexcept { return policy_.get(); }  // to inject a failure
  const MoveFeedback& moves() const noexcept { return *feedback_; }
  // Bytes of blocks freed while spilled (their bytes never came back).
  std::uint64_t bytes_freed_while_spilled() const noexcept { return freed_spilled_bytes_.load(); }
  // Steps and memory over time; null unless some output is asked for.
  RunMonitor* monitor() const noexcept { return monitor_.get(); }
  // Writes every output asked for (runtime/engine_outputs.cpp): at exit,
  // and on SIGTERM / SIGINT from the monitor's thread.
  void write_outputs() noexcept;

  // cuMemAllocAsync on `stream`: on a capturing stream the allocation is the
  // driver's (a graph memory node the graph frees), else tierrt's.
  template <class Forward>
  CUresult allocate_async(CUdeviceptr* out, std::size_t bytes, CUstream stream, Forward&& forward) noexcept {
    return captures_.capturing(stream) ? forward() : allocate(out, bytes, stream);
  }

  // Stream capture (cuStreamBeginCapture in every form, and
  // cuStreamBeginCaptureToGraph). A global-mode capture forbids unmapping
  // and mapping anywhere in the process: moves are held from before it
  // begins until it ends.
  template <class Forward>
  CUresult begin_capture(CUstream s, CUstreamCaptureMode mode, Forward&& forward) noexcept {
    const bool global = mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (global) hold_for_capture();
    alloc_->flush_uses(StreamIds::key(s));  // nothing of ours recorded into the capture
    const CUresult r = forward();
    if (!(r == CUDA_SUCCESS && capture_began(s, mode)) && global) resume_after_capture();
    return r;
  }
  // The driver's own calls that begin, join or end a capture, made through
  // the process's capture gate (allocator/capture_gate.h) by the capture
  // hooks, innermost, so that no probe of tierrt's straddles them.
  template <class Call>
  static CUresult gated_begin(Call&& call) noexcept {
    return alloc::CaptureGate::process().begin(call);
  }
  template <class Call>
  static CUresult gated_wait(Call&& call) noexcept {
    return alloc::CaptureGate::process().join(call);
  }
  template <class Call>
  static CUresult gated_end(CUstream s, Call&& call) noexcept {
    return alloc::CaptureGate::process().end(s, call);
  }
  // cuStreamEndCapture: what the capture named belongs to the graph made.
  template <class Forward>
  CUresult end_capture(CUstream s, CUgraph* graph, Forward&& forward) noexcept {
    const std::uint64_t id = capture_of(s);
    const CUresult r = forward();
    capture_ended(s, id, r == CUDA_SUCCESS && graph ? *graph : nullptr);
    return r;
  }
  // Side streams join a capture through events: cuEventRecord(WithFlags) and
  // cuStreamWaitEvent, as they went out.
  void note_event_record(CUevent ev, CUstream s) noexcept { captures_.note_record(ev, s); }
  void note_stream_wait(CUstream s, CUevent ev) noexcept { captures_.note_wait(s, ev); }
  // cuStreamWaitEvent about to go out: while some capture is open, `s` may
  // be joining it.
  void before_stream_wait(CUstream s) noexcept {
    if (captures_.any_active()) alloc_->flush_uses(StreamIds::key(s));
  }
  // cuStreamDestroy about to go out: a stream made later may get its handle.
  void stream_destroyed(CUstream s) noexcept { alloc_->flush_uses(StreamIds::key(s), /*stream_destroyed=*/true); }
  bool capturing(CUstream s) noexcept { return captures_.capturing(s); }

  // Graphs built node by node, instantiated, updated and destroyed: each
  // forwards, and what succeeded updates what tierrt knows of the graph.
  template <class Forward>
  CUresult graph_instantiate(CUgraphExec* exec, CUgraph graph, Forward&& forward) noexcept {
    const CUresult r = forward();
    if (r == CUDA_SUCCESS && exec) graph_instantiated(graph, *exec);
    return r;
  }
  template <class Forward>
  CUresult graph_exec_update(CUgraphExec exec, CUgraph graph, Forward&& forward) noexcept {
    const CUresult r = forward();
    if (r == CUDA_SUCCESS) graph_instantiated(graph, exec);
    return r;
  }
  template <class Forward>
  CUresult graph_add_kernel_node(CUgraphNode* node, CUgraph graph, const CUDA_KERNEL_NODE_PARAMS* p,
                                 Forward&& forward) noexcept {
    const CUresult r = forward();
    if (r == CUDA_SUCCESS && node && p) graph_kernel_node(graph, *node, nullptr, p);
    return r;
  }
  template <class Forward>
  CUresult graph_set_kernel_node(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p, Forward&& forward) noexcept {
    const CUresult r = forward();
    if (r == CUDA_SUCCESS && p) graph_kernel_node(nullptr, node, nullptr, p);
    return r;
  }
  template <class Forward>
  CUresult graph_exec_set_kernel_node(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p,
                                      Forward&& forward) noexcept {
    const CUresult r = forward();
    if (r == CUDA_SUCCESS && p) graph_kernel_node(nullptr, node, exec, p);
    return r;
  }
  template <class Forward>
  CUresult graph_add_memcpy_node(CUgraphNode* node, CUgraph graph, const CUDA_MEMCPY3D* p, Forward&& forward) noexcept {
    const CUresult r = forward();
    if (r == CUDA_SUCCESS && node && p) graph_memcpy_node(graph, *node, *p);
    return r;
  }
  template <class Forward>
  CUresult graph_add_memset_node(CUgraphNode* node, CUgraph graph, const CUDA_MEMSET_NODE_PARAMS* p,
                                 Forward&& forward) noexcept {
    const CUresult r = forward();
    if (r == CUDA_SUCCESS && node && p) graph_memset_node(graph, *node, *p);
    return r;
  }
  template <class Forward>
  CUresult graph_destroy(CUgraph graph, Forward&& forward) noexcept {
    const CUresult r = forward();
    if (r == CUDA_SUCCESS) graph_forget(graph, nullptr);
    return r;
  }
  template <class Forward>
  CUresult graph_exec_destroy(CUgraphExec exec, Forward&& forward) noexcept {
    const CUresult r = forward();
    if (r == CUDA_SUCCESS) graph_forget(nullptr, exec);
    return r;
  }

 private:
  Engine(const Settings& s, std::unique_ptr<alloc::Allocator> a, CUcontext ctx, CUmemoryPool default_pool);

  // True when the calling thread's current context is the engine's.
  bool on_engine_context() const noexcept;
  bool free_tracked(CUdeviceptr ptr, CUstream stream, CUresult* result) noexcept;
  // Blocks a launch names: every 8-byte-aligned word of its parameters;
  // false when the layout is unknown (the launch may touch any block).
  bool collect_launch(CUfunction f, void** params, void** extra, BlockList& out) noexcept;
  // The live block a word points into, or what the pointer table of the
  // small-allocation slot it points to names; false: every block.
  bool collect_word(CUdeviceptr word, BlockList& out) noexcept;
  // A launch's word points into member `b` of a granule group: the members
  // from there to the next boundary launches named in the group (at most
  // TIERRT_GRANULE_EXTENT bytes), and the boundary is learned.
  void collect_extent(alloc::Block* b, CUdeviceptr word, BlockList& out) noexcept;
  // Whether work naming `b` uses it: not freed, or a group's member never
  // used yet (its first use maps it).
  static bool usable(const alloc::Block* b) noexcept {
    return b->st() != alloc::State::Freed || b->untouched.load(std::memory_order_relaxed);
  }
  // f(member) for each member of b's granule group, or f(b) for a block of its own.
  template <class F>
  void for_each_member(alloc::Block* b, F&& f) noexcept {
    const alloc::Group* g = b->group;
    if (!g) return f(b);
    for (std::uint32_t i = 0; i < g->count; ++i)
      if (alloc::Block* m = alloc_->lookup(g->va + i * g->unit); m && m->group == g) f(m);
  }
  // Blocks a copy or memset names: every block the range overlaps, and what
  // the pointer table of a small-allocation slot at either end names.
  bool collect_range(AddressRange range, BlockList& out) noexcept;
  // Every block a strided range overlaps.
  void collect_strided(const StridedRange& range, BlockList& out) noexcept;
  // Adds every block [ptr, ptr + bytes) overlaps; returns the end of the
  // last region looked at (a block's mapped end, or a granule's end where
  // no block is): a later range ending there names nothing more.
  CUdeviceptr collect_span(CUdeviceptr ptr, std::size_t bytes, BlockList& out) noexcept;
  // Adds the blocks the pointer tables held by `blocks` point to, and those
  // their tables point to; false when one of them points to every block.
  bool add_pointed_to(BlockList& blocks) noexcept;
  // Replaces `blocks` by every live block.
  void name_every_block(BlockList& blocks) noexcept;
  // The pointer-table unit an address is in: its block, or the address
  // itself inside a small-allocation slot; 0 outside tierrt's memory.
  PointerTables::Unit unit_of(CUdeviceptr p) const noexcept;
  static PointerTables::Unit unit_of(alloc::Block* b) noexcept { return reinterpret_cast<PointerTables::Unit>(b); }
  // Adds the block `target` unless it was freed.
  static void add_live(PointerTables::Unit target, BlockList& out) noexcept;
  void note_host_words(CUdeviceptr dst, const void* src, std::size_t bytes) noexcept;
  void note_device_copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) noexcept;
  void note_unified_copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) noexcept;
  // The one shape of work that names tracked blocks: make them resident for
  // the stream `key`, forward, record the use if the work went out, unpin.
  // `refusal` is what the application's call reports when its blocks could
  // not be made usable (see before_use).
  template <class Forward>
  CUresult use(BlockList& blocks, CUstream key, bool capturing, Forward& forward, CUresult refusal) noexcept {
    if (blocks.empty()) return forward();
    // The capture hooks know streams by the application's handles; `key` is
    // the calling thread's, so it turns back into the handle it came from.
    if (capturing) return use_captured(blocks, drv::driver_stream(key), forward);
    if (CUresult r = before_use(blocks, key, refusal)) return r;
    const CUresult r = forward();
    after_use(blocks, key, capturing, r == CUDA_SUCCESS);
    return r;
  }
  // Makes the blocks resident for `key`. When that fails on one of tierrt's
  // own driver calls (a fetch, a mapping, an event), the application's call
  // was never made and reports `refusal` instead: the error the driver
  // documents for it when it lacks what it needs to run (CUDA_SUCCESS keeps
  // the failure as it was). The driver's asynchronous errors, which any call
  // may report, capture errors and INVALID_VALUE stand.
  // `brief`: the use is recorded right after the work is enqueued, on this
  // thread (after_use), so the launch may be announced instead of pinned.
  CUresult before_use(BlockList& blocks, CUstream key, CUresult refusal, bool brief = true) noexcept;
  void after_use(const BlockList& blocks, CUstream key, bool capturing, bool enqueued) noexcept;
  // `several_engines`: count() > 1, as the caller read it.
  bool may_record_lazily(const BlockList& blocks, CUstream key, bool several_engines) const noexcept;
  // A launch went out on the stream `key` naming `blocks`.
  void note_launch(const BlockList& blocks, CUstream key, bool capturing) noexcept;
  // Answered: `data` holds tierrt's answer. Invalid: the driver's error for
  // memory that is not a live allocation, or an attribute that does not
  // apply to device memory. Driver: the driver's to answer.
  enum class PointerAnswer : std::uint8_t { Answered, Invalid, Driver };
  PointerAnswer tracked_attribute(CUpointer_attribute attr, CUdeviceptr p, void* data) noexcept;
  // The null answer cuPointerGetAttributes gives where an attribute does not apply.
  static void clear_attribute(CUpointer_attribute attr, void* data) noexcept;
  // Live: an allocation tierrt handed out holds p. Gone: tierrt's memory,
  // but no live allocation holds p (freed, or a slab's unused part).
  enum class Allocation : std::uint8_t { Live, Gone, NotOurs };
  Allocation allocation_at(CUdeviceptr p, AllocationRecord* out) const noexcept;
  static int current_device_ordinal() noexcept;
  // The calling thread is inside an NCCL group.
  static bool nccl_grouped() noexcept;
  // Room for `n` more blocks in the calling thread's group.
  static bool reserve_group(std::size_t n) noexcept;
  void defer_to_group_end(const BlockList& blocks, CUstream stream) noexcept;
  // The outermost group ended: record (if its work went out) and release
  // the uses deferred to it.
  void end_group_uses(bool went_out) noexcept;
  void virtual_meminfo(std::size_t* free_bytes, std::size_t* total_bytes) noexcept;
  void add_live(std::int64_t delta) noexcept;
  void sample(SampleKind kind, std::uint64_t ptr, std::uint64_t bytes) noexcept;
  // An event for whoever listens: the recording and the planner.
  void emit(const policy::Event& e) noexcept;
  bool listening() const noexcept { return policy_ || (recorder_ && recorder_->events_on()); }
  static void after_fork_in_child() noexcept;
  static void at_exit() noexcept;
  void start_monitor() noexcept;
  static RunCounters read_counters(void* engine) noexcept;

  // Graphs and captures (runtime/engine_graph.cpp).
  template <class Forward>
  CUresult use_captured(const BlockList& blocks, CUstream stream, Forward& forward) noexcept {
    // Nothing runs until the graph is launched: nothing is made resident now,
    // and nothing of tierrt's is recorded into, or waited on from, the capture.
    const CUresult r = forward();
    if (r == CUDA_SUCCESS) note_captured(blocks, stream, true);
    return r;
  }
  void note_captured(const BlockList& blocks, CUstream stream, bool known) noexcept;
  bool free_captured(CUdeviceptr ptr, CUstream stream) noexcept;
  bool capture_began(CUstream s, CUstreamCaptureMode mode) noexcept;
  // The capture `s` takes part in (the driver's id, or tierrt's own name for
  // it); 0 when none.
  std::uint64_t capture_of(CUstream s) noexcept;
  void capture_ended(CUstream s, std::uint64_t id, CUgraph graph) noexcept;
  static void hold_for_discovered_capture(void* engine) noexcept;
  // A global-mode capture began (or may have) / ended: moves are held
  // meanwhile, and allocations go to the driver, which refuses them where it
  // forbids them (potentially unsafe calls) and grants them where not.
  void hold_for_capture() noexcept {
    global_captures_.fetch_add(1, std::memory_order_relaxed);
    alloc_->hold_moves();
  }
  void resume_after_capture() noexcept {
    alloc_->resume_moves();
    global_captures_.fetch_sub(1, std::memory_order_relaxed);
  }
  // The blocks `exec` names; true when some of its nodes could not be read.
  bool collect_graph(CUgraphExec exec, BlockList& out) noexcept;
  void graph_launched(CUgraphExec exec, const BlockList& blocks, CUstream stream, bool unknown,
                      bool enqueued) noexcept;
  void graph_instantiated(CUgraph graph, CUgraphExec exec) noexcept;
  void graph_kernel_node(CUgraph graph, CUgraphNode node, CUgraphExec exec, const CUDA_KERNEL_NODE_PARAMS* p) noexcept;
  void graph_memcpy_node(CUgraph graph, CUgraphNode node, const CUDA_MEMCPY3D& p) noexcept;
  void graph_memset_node(CUgraph graph, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS& p) noexcept;
  void graph_forget(CUgraph graph, CUgraphExec exec) noexcept;
  // Keeps what a graph names resident for good: for work tierrt could not
  // attribute to a graph it knows.
  void pin_for_good(const BlockList& blocks, CUstream stream) noexcept;

  static std::atomic<Engine*> g_engines[kMaxEngines];
  static std::atomic<int> g_count;
  void grant_peer(int device) noexcept;
  std::atomic<bool> peers_granted_{false};

  Settings settings_;
  std::unique_ptr<alloc::Allocator> alloc_;
  CUcontext ctx_;
  CUmemoryPool default_pool_;
  ParamLayouts& layouts_ = ParamLayouts::process();
  PointerTables pointers_;
  CaptureTracker captures_;
  std::atomic<int> global_captures_{0};
  GraphRegistry graphs_;
  StreamIds streams_;
  std::unique_ptr<Recorder> recorder_;      // null unless TIERRT_RECORD or TIERRT_TRACE
  std::unique_ptr<MoveFeedback> feedback_;  // the allocator's observer
  std::unique_ptr<PolicyThread> policy_;    // null unless TIERRT_POLICY=planner
  std::atomic<std::uint64_t> launches_{0}, steps_{0};
  std::atomic<std::uint64_t> live_bytes_{0}, peak_live_bytes_{0};
  std::atomic<std::uint64_t> freed_spilled_bytes_{0};
  RankedMutex outputs_mu_{kRankOutputs, "runtime.outputs"};                // one writer of the outputs at a time
  std::unique_ptr<RunMonitor> monitor_;  // last: its thread reads what is above
  AllocationRecords records_;
  int device_ordinal_ = current_device_ordinal();  // made on the thread that has ctx_ current
  NcclRegistrations nccl_registrations_;
};

}  // namespace tierrt
