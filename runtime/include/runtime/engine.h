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

#include "allocator/allocator.h"
#include "runtime/allocation_records.h"
#include "runtime/block_list.h"
#include "runtime/capture_tracker.h"
#include "runtime/copy_shapes.h"
#include "runtime/move_feedback.h"
#include "runtime/nccl_registrations.h"
#include "runtime/param_layouts.h"
#include "runtime/policy_thread.h"
#include "runtime/recorder.h"
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
  // The running engine, or null (off, not started yet, or failed to start).
  static Engine* active() noexcept { return g_active.load(std::memory_order_acquire); }
  // Starts the engine for the current context unless tierrt is off; returns
  // the running engine or null. Safe from any thread; only the first call
  // reads the environment.
  static Engine* start() noexcept;
  // The engine an allocation on the calling thread goes to: started on first
  // use, and only when the current context is the engine's; else null.
  static Engine* for_allocation() noexcept;
  // Makes a context of device `ordinal` current unless the current one is on
  // it already (PyTorch's allocator calls name the device, not a context).
  static bool make_device_current(int ordinal) noexcept;
  // An engine of its own for `s` on the current context, not the process's
  // running one (which start() makes): null when the allocator could not start.
  static std::unique_ptr<Engine> create(const Settings& s, CUresult* err) noexcept;
  ~Engine();

  const Settings& settings() const noexcept { return settings_; }

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
    CUresult r;
    return free_tracked(ptr, stream, &r) ? r : forward();
  }

  // A kernel launch on `stream` with cuLaunchKernel's params or extra: the
  // tracked blocks any 8-byte-aligned parameter word points into are resident
  // for the stream when the launch goes out, and their use is recorded.
  template <class Forward>
  CUresult launch(CUfunction f, CUstream stream, void** params, void** extra, Forward&& forward) noexcept {
    BlockList blocks;
    collect_launch(f, params, extra, blocks);
    const CUresult r = use(blocks, stream, forward);
    if (r == CUDA_SUCCESS) note_launch(blocks, stream);
    return r;
  }
  // A copy or memset on `stream` touching `ranges`: like a launch, uncounted.
  template <class Forward>
  CUresult access(std::initializer_list<AddressRange> ranges, CUstream stream, Forward&& forward) noexcept {
    BlockList blocks;
    for (const AddressRange& r : ranges) collect_range(r, blocks);
    return use(blocks, stream, forward);
  }
  // A copy, memset or stream memory operation on `stream` touching
  // `range_at(i)` (a StridedRange) for each i below `count`: every block each
  // range overlaps is named, as access does.
  template <class RangeAt, class Forward>
  CUresult access_each(std::size_t count, RangeAt&& range_at, CUstream stream, Forward&& forward) noexcept {
    BlockList blocks;
    for (std::size_t i = 0; i < count; ++i) collect_strided(range_at(i), blocks);
    return use(blocks, stream, forward);
  }
  // cuGraphLaunch on `stream`. Every block a captured launch named stays
  // resident for good (the allocator's captured state), so a replay needs
  // nothing made resident; it counts as a launch of its stream.
  template <class Forward>
  CUresult graph_launch(CUstream stream, Forward&& forward) noexcept {
    const CUresult r = forward();
    if (r == CUDA_SUCCESS) note_launch(BlockList{}, stream);
    return r;
  }

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
    if (CUresult r = before_use(blocks, stream)) return r;
    const bool went_out = forward();
    if (went_out && grouped) defer_to_group_end(blocks, stream);
    else after_use(blocks, stream, went_out);
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

  // Stream capture, as the capture hooks saw it succeed.
  void begin_capture(CUstream s, CUstreamCaptureMode mode) noexcept { captures_.begin(s, mode); }
  void end_capture(CUstream s) noexcept { captures_.end(s); }

  // tierrt_advise: false when `ptr` is not in a live tracked block or the
  // advice could not be followed. UNPIN releases only a pin PIN took (the
  // allocator counts them apart from the pins of launches being enqueued).
  bool advise(CUdeviceptr ptr, tierrt_advice advice) noexcept;

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
  const MoveFeedback& moves() const noexcept { return *feedback_; }

 private:
  Engine(const Settings& s, std::unique_ptr<alloc::Allocator> a, CUcontext ctx, CUmemoryPool default_pool);

  // True when the calling thread's current context is the engine's.
  bool on_engine_context() const noexcept;
  bool free_tracked(CUdeviceptr ptr, CUstream stream, CUresult* result) noexcept;
  // Blocks a launch names: every 8-byte-aligned word of its parameters.
  void collect_launch(CUfunction f, void** params, void** extra, BlockList& out) noexcept;
  // Blocks a copy or memset names: every block the range overlaps.
  void collect_range(AddressRange range, BlockList& out) noexcept;
  void collect_strided(const StridedRange& range, BlockList& out) noexcept;
  // Adds every block [ptr, ptr + bytes) overlaps; returns the end of the
  // last region looked at (a block's mapped end, or a granule's end where
  // no block is): a later range ending there names nothing more.
  CUdeviceptr collect_span(CUdeviceptr ptr, std::size_t bytes, BlockList& out) noexcept;
  // The one shape of work that names tracked blocks: make them resident for
  // `stream`, forward, record the use if the work went out, unpin.
  template <class Forward>
  CUresult use(const BlockList& blocks, CUstream stream, Forward& forward) noexcept {
    if (blocks.empty()) return forward();
    if (CUresult r = before_use(blocks, stream)) return r;
    const CUresult r = forward();
    after_use(blocks, stream, r == CUDA_SUCCESS);
    return r;
  }
  CUresult before_use(const BlockList& blocks, CUstream stream) noexcept;
  void after_use(const BlockList& blocks, CUstream stream, bool enqueued) noexcept;
  // A launch went out on `stream` naming `blocks`.
  void note_launch(const BlockList& blocks, CUstream stream) noexcept;
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

  static std::atomic<Engine*> g_active;

  Settings settings_;
  std::unique_ptr<alloc::Allocator> alloc_;
  CUcontext ctx_;
  CUmemoryPool default_pool_;
  ParamLayouts layouts_;
  CaptureTracker captures_;
  StreamIds streams_;
  std::unique_ptr<Recorder> recorder_;      // null unless TIERRT_RECORD or TIERRT_TRACE
  std::unique_ptr<MoveFeedback> feedback_;  // the allocator's observer
  std::unique_ptr<PolicyThread> policy_;    // null unless TIERRT_POLICY=planner
  std::atomic<std::uint64_t> launches_{0}, steps_{0};
  std::atomic<std::uint64_t> live_bytes_{0}, peak_live_bytes_{0};
  AllocationRecords records_;
  int device_ordinal_ = current_device_ordinal();  // made on the thread that has ctx_ current
  NcclRegistrations nccl_registrations_;
};

}  // namespace tierrt
