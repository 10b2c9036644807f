#include "runtime/engine.h"

#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "driver/driver.h"
#include "log.h"
#include "node_ledger.h"
#include "stats_report.h"

namespace tierrt {


namespace {

alloc::Options allocator_options(const ResolvedSettings& r, alloc::HostShare* node_share) {
  alloc::Options o;
  o.host_share = node_share;
  o.device_budget = r.device_budget;
  o.host_budget = r.host_budget;
  o.min_bytes = r.min_bytes;
  o.mode = r.spill_mode;
  o.group_bytes = r.granule_bytes;
  o.group_unit = r.granule_unit;
  o.lazy_use_window_ns = r.use_event_window_ns;
  return o;
}

// The calling thread's context, its device and the device's memory.
CUresult current_device(CUcontext* ctx, CUdevice* dev, size_t* total) noexcept {
  if (CUresult r = TIERRT_CU(cuCtxGetCurrent, ctx)) return r;
  if (!*ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = TIERRT_CU(cuCtxGetDevice, dev)) return r;
  return TIERRT_CU(cuDeviceTotalMem, total, *dev);
}

// An allocation tierrt refused, in one line at warn level with the reason
// the allocator's counters give. A job may retry in a loop: the first few
// are said, then every 1000th (each at debug level).
void say_refused(std::size_t bytes, CUresult r, const alloc::Stats& s, Mode mode) noexcept {
  constexpr std::uint64_t kSaidInFull = 8;
  static std::atomic<std::uint64_t> refusals{0};
  const std::uint64_t n = refusals.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n > kSaidInFull && n % 1000 != 0 && !log::enabled(LogLevel::Debug)) return;
  // Past the budget an allocation is refused only when the device itself has
  // no room (otherwise it goes over the budget: Stats::over_budget).
  const bool capture_error = r >= CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && r <= CUDA_ERROR_CAPTURED_EVENT;
  const char* why = capture_error ? "the memory it would reuse is still used by work on a capturing stream, "
                                    "which cannot be waited for until that capture ends"
                    : r != CUDA_ERROR_OUT_OF_MEMORY ? "a driver call failed while making room"
                    : bytes > s.device_budget ? "it is larger than the device budget and the device has no room for it"
                    : mode == Mode::Observe ? "the device is full, and observe mode moves nothing"
                    : s.host_used + bytes > s.host_budget
                        ? "the device budget is spent and the host tier is full (TIERRT_HOST_BUDGET)"
                        : "the device budget is spent and no idle block could be spilled";
  TIERRT_LOG(Warn, "refused an allocation of %llu bytes (%s): %s; device %llu of %llu MiB budget, host tier %llu of "
                   "%llu MiB (refusal %llu%s)",
             static_cast<unsigned long long>(bytes), drv::result_name(r), why,
             static_cast<unsigned long long>(s.device_used >> 20), static_cast<unsigned long long>(s.device_budget >> 20),
             static_cast<unsigned long long>(s.host_used >> 20), static_cast<unsigned long long>(s.host_budget >> 20),
             static_cast<unsigned long long>(n), n == kSaidInFull ? "; from now on every 1000th is said" : "");
}

}  // namespace

Engine::Engine(const Settings& s, std::unique_ptr<alloc::Allocator> a, CUcontext ctx, CUmemoryPool default_pool)
    : settings_(s), alloc_(std::move(a)), ctx_(ctx), default_pool_(default_pool) {
  if (!s.record.empty() || !s.trace.empty()) recorder_ = std::make_unique<Recorder>(s.record, s.trace);
  // The planner acts only when it tiers; a recorded (or traced) run gets one
  // that only watches, so that its launches carry device times (what tierrt-replay and
  // `tierrt-run --estimate` model the step with), not the host's.
  const bool plans = s.mode == Mode::Tier && s.policy == Policy::Planner;
  if (plans || recorder_)
    policy_ = std::make_unique<PolicyThread>(*alloc_, ctx, alloc_->stats().device_budget, s.link, recorder_.get(),
                                             plans);
  feedback_ = std::make_unique<MoveFeedback>(recorder_.get(), policy_.get());
  alloc_->set_observer(feedback_.get());
  captures_.on_hold(&Engine::hold_for_discovered_capture, this);
  start_monitor();
}

// The process's running engine is never destroyed; one from create() is.
// The planner's thread acts through the allocator, and the allocator's mover
// reports to feedback_ and policy_: stop the first, then the allocator.
Engine::~Engine() {
  monitor_.reset();
  if (policy_) policy_->stop();
  alloc_.reset();
}

std::unique_ptr<Engine> Engine::create(const Settings& asked, CUresult* err, SharedHost shared_host) noexcept {
  Settings s = asked;
  if (s.mode == Mode::Tier && !ParamLayouts::driver_describes_parameters()) {
    // Without parameter layouts no launch can be told apart from one that
    // touches every block: moving memory would stall every launch.
    TIERRT_LOG(Error, "this driver cannot describe kernel parameters (cuFuncGetParamInfo needs CUDA 12.4): "
                      "tiering is off, observe mode only");
    s.mode = Mode::Observe;
  }
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  size_t total = 0;
  if ((*err = current_device(&ctx, &dev, &total)) != CUDA_SUCCESS) return nullptr;
  // Without a default pool (old drivers) no pool allocation is tiered.
  CUmemoryPool pool = nullptr;
  if (TIERRT_CU(cuDeviceGetDefaultMemPool, &pool, dev) != CUDA_SUCCESS) pool = nullptr;
  try {
    const ResolvedSettings resolved = resolve(s, this_machine(total));
    alloc::HostShare* share = shared_host ? shared_host(s, resolved.host_budget) : process_node_ledger(s);
    const alloc::Options options = allocator_options(resolved, share);
    std::unique_ptr<alloc::Allocator> a = alloc::Allocator::create(options, err);
    if (!a) return nullptr;
    const alloc::Stats st = a->stats();
    TIERRT_LOG(Info, "started on device %d: mode %s, spill %s, device budget %llu MiB, host budget %llu MiB", dev,
               s.mode == Mode::Tier ? "tier" : "observe", alloc::to_string(a->mode()),
               static_cast<unsigned long long>(st.device_budget >> 20),
               static_cast<unsigned long long>(st.host_budget >> 20));
    say_host_placement(st);
    if (resolved.granule_bytes != 0 && !a->groups_large_allocations())
      TIERRT_LOG(Warn, "granule tiering (TIERRT_GRANULE_BYTES) needs remap mode, and spilling is in %s mode here: "
                       "large allocations are tiered whole",
                 alloc::to_string(a->mode()));
    return std::unique_ptr<Engine>(new Engine(s, std::move(a), ctx, pool));
  } catch (...) {
    *err = CUDA_ERROR_OUT_OF_MEMORY;
    return nullptr;
  }
}

void Engine::sample(SampleKind kind, std::uint64_t ptr, std::uint64_t bytes) noexcept {
  if (!recorder_ || !recorder_->samples_on()) return;
  const alloc::Stats s = alloc_->stats();
  recorder_->sample(kind, ptr, bytes, s.device_used, s.host_used);
}

void Engine::emit(const policy::Event& e) noexcept {
  if (recorder_ && recorder_->events_on()) recorder_->event(e);
  if (policy_) policy_->post(e);
}

void Engine::note_step() noexcept {
  const std::uint64_t index = steps_.fetch_add(1, std::memory_order_relaxed);
  alloc_->step_ended();
  emit(policy::Event::step(index));
  sample(SampleKind::Step, index, 0);
  if (monitor_) monitor_->step_marked();
}

void Engine::note_phase(int phase) noexcept {
  emit(policy::Event::phase(static_cast<policy::Phase>(phase)));
  sample(SampleKind::Phase, static_cast<std::uint64_t>(phase), 0);
}

void Engine::note_sync(CUstream stream, bool all_streams) noexcept {
  if (listening())
    emit(policy::Event::sync(all_streams ? policy::kAllStreams : streams_.id(StreamIds::key(stream))));
}

bool Engine::on_engine_context() const noexcept {
  CUcontext c = nullptr;
  return TIERRT_CU(cuCtxGetCurrent, &c) == CUDA_SUCCESS && c == ctx_;
}

void Engine::add_live(std::int64_t delta) noexcept {
  std::uint64_t now = live_bytes_.fetch_add(static_cast<std::uint64_t>(delta), std::memory_order_relaxed) +
                      static_cast<std::uint64_t>(delta);
  std::uint64_t peak = peak_live_bytes_.load(std::memory_order_relaxed);
  while (now > peak && !peak_live_bytes_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

CUresult Engine::allocate(CUdeviceptr* out, size_t bytes, CUstream app_stream) noexcept {
  alloc::AllocFlags flags;
  // Under a global-mode capture the driver decides: it refuses a potentially
  // unsafe allocation (and invalidates the capture), as it would without
  // tierrt, or grants one untiered (a relaxed thread).
  flags.pass_through = captures_.capturing(app_stream) || global_captures_.load(std::memory_order_relaxed) > 0;
  const CUstream stream = StreamIds::key(app_stream);
  CUresult r = alloc_->allocate(out, bytes, stream, flags);
  if (r != CUDA_SUCCESS) {
    if (!flags.pass_through) say_refused(bytes, r, alloc_->stats(), settings_.mode);
    return r;
  }
  if (!flags.pass_through) records_.add(*out, bytes);
  if (alloc::Block* b = alloc_->lookup(*out)) {
    add_live(static_cast<std::int64_t>(bytes));
    // A granule group's members are blocks to the planner and the recording.
    if (listening()) for_each_member(b, [&](alloc::Block* m) {
      emit(policy::Event::alloc(m->va, m->size, streams_.id(stream), /*lazy=*/m->group != nullptr));
    });
    sample(SampleKind::Alloc, b->va, bytes);
  }
  return r;
}

bool Engine::free_tracked(CUdeviceptr ptr, CUstream app_stream, CUresult* result) noexcept {
  const CUstream stream = StreamIds::key(app_stream);
  if (!alloc_->owns(ptr)) {
    // Made under capture with a plain cuMemAlloc: the driver frees it, the
    // way the application asked (cuMemFree or cuMemFreeAsync).
    (void)alloc_->forget_pass_through(ptr);
    return false;
  }
  alloc::Block* b = alloc_->lookup(ptr);
  const alloc::Group* g = b && b->va == ptr ? b->group : nullptr;
  const size_t size = !b || b->va != ptr ? 0 : g ? g->bytes : b->size;
  // Before the free: once freed, the blocks may be handed out again.
  std::uint64_t spilled = 0;
  const CUdeviceptr first = g ? g->va : ptr;
  const std::size_t unit = g ? g->unit : 0;
  const std::uint32_t members = g ? g->count : 1;
  if (size) for_each_member(b, [&](alloc::Block* m) {
    if (m->st() == alloc::State::Spilled) spilled += m->size;
  });
  pointers_.forget(b ? unit_of(b) : ptr);
  records_.remove(ptr);
  *result = alloc_->free(ptr, stream);
  if (*result == CUDA_SUCCESS && size) {
    add_live(-static_cast<std::int64_t>(size));
    if (spilled) freed_spilled_bytes_.fetch_add(spilled, std::memory_order_relaxed);
    if (listening())
      for (std::uint32_t i = 0; i < members; ++i) emit(policy::Event::free(first + i * unit, streams_.id(stream)));
    sample(SampleKind::Free, ptr, size);
  }
  return true;
}

bool Engine::advise(CUdeviceptr ptr, tierrt_advice advice) noexcept {
  alloc::Block* b = alloc_->lookup(ptr);
  if (!b || b->st() == alloc::State::Freed) return false;
  switch (advice) {
    case TIERRT_ADVISE_SPILL: {
      const alloc::SpillResult r = alloc_->spill(b);
      return r == alloc::SpillResult::Started || r == alloc::SpillResult::AlreadyMoving;
    }
    case TIERRT_ADVISE_PREFETCH: return alloc_->prefetch(b, nullptr) == CUDA_SUCCESS;
    case TIERRT_ADVISE_PIN: return alloc_->pin(b, CU_STREAM_LEGACY) == CUDA_SUCCESS;
    case TIERRT_ADVISE_UNPIN: return alloc_->unpin(b);
  }
  return false;
}

bool Engine::keep_exported(CUdeviceptr ptr) noexcept {
  alloc::Block* b = alloc_->lookup(ptr);
  if (!b || b->st() == alloc::State::Freed) return false;
  alloc::Block* one[] = {b};
  if (alloc_->ensure_resident(one, CU_STREAM_LEGACY) != CUDA_SUCCESS) return false;
  // As a block a captured graph names: resident until the allocation is freed.
  (void)alloc_->record_use(one, CU_STREAM_LEGACY, /*capturing=*/true);
  alloc_->release(one);
  return true;
}

void Engine::virtual_meminfo(size_t* free_bytes, size_t* total_bytes) noexcept {
  const alloc::Stats s = alloc_->stats();
  const std::uint64_t total = s.device_budget + s.host_budget;
  const std::uint64_t used = s.device_used + s.host_used;
  *total_bytes = total;
  *free_bytes = used < total ? total - used : 0;
}

void Engine::public_stats(tierrt_stats* out) const noexcept { fill_public_stats(*this, out); }

}  // namespace tierrt
