#include "runtime/engine.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <mutex>

#include "driver/driver.h"
#include "runtime/log.h"
#include "runtime/stats_report.h"

namespace tierrt {

std::atomic<Engine*> Engine::g_active{nullptr};

namespace {

std::mutex g_start_mu;
bool g_settings_read = false;
bool g_off = false;  // decided for the whole process: off, bad settings, or no driver
Settings* g_settings = nullptr;

std::uint64_t physical_ram() noexcept {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : 0;
}

bool read_once() noexcept {
  if (g_settings_read) return !g_off;
  g_settings_read = true;
  auto* s = new Settings;
  std::string error;
  if (!read_settings(s, &error)) {
    // Always said, whatever TIERRT_LOG is: the user asked for something we refuse.
    std::fprintf(stderr, "%s; tierrt is off for this process\n", error.c_str());
    g_off = true;
    delete s;
    return false;
  }
  g_settings = s;
  log::configure(s->log_level, s->log_file.c_str());
  if (s->mode == Mode::kOff) g_off = true;
  return !g_off;
}

alloc::Options allocator_options(const ResolvedSettings& r) {
  alloc::Options o;
  o.device_budget = r.device_budget;
  o.host_budget = r.host_budget;
  o.min_bytes = r.min_bytes;
  o.mode = r.spill_mode;
  return o;
}

}  // namespace

const Settings* Engine::settings_if_read() noexcept { return g_off ? nullptr : g_settings; }

Engine::Engine(const Settings& s, std::unique_ptr<alloc::Allocator> a, CUcontext ctx)
    : settings_(s), alloc_(std::move(a)), ctx_(ctx) {
  if (!s.record.empty() || !s.trace.empty()) recorder_ = std::make_unique<Recorder>(s.record, s.trace);
  if (s.mode == Mode::kTier && s.policy == Policy::Planner)
    policy_ = std::make_unique<PolicyThread>(*alloc_, ctx, alloc_->stats().device_budget, s.link, recorder_.get());
  feedback_ = std::make_unique<MoveFeedback>(recorder_.get(), policy_.get());
  alloc_->set_observer(feedback_.get());
}

void Engine::emit(const policy::Event& e) noexcept {
  if (recorder_ && recorder_->events_on()) recorder_->event(e);
  if (policy_) policy_->post(e);
}

Engine* Engine::start() noexcept {
  if (Engine* e = active()) return e;
  std::lock_guard lock(g_start_mu);
  if (Engine* e = active()) return e;
  if (!read_once()) return nullptr;
  if (!drv::loaded()) {
    TIERRT_LOG(kError, "libcuda.so.1 could not be loaded; tierrt is off");
    g_off = true;
    return nullptr;
  }
  CUcontext ctx = nullptr;
  if (TIERRT_CU(cuCtxGetCurrent, &ctx) != CUDA_SUCCESS || !ctx) return nullptr;  // try again with a context
  CUdevice dev = 0;
  size_t total = 0;
  if (TIERRT_CU(cuCtxGetDevice, &dev) != CUDA_SUCCESS || TIERRT_CU(cuDeviceTotalMem, &total, dev) != CUDA_SUCCESS)
    return nullptr;
  alloc::Options opt = allocator_options(resolve(*g_settings, {total, physical_ram()}));
  CUresult err = CUDA_SUCCESS;
  std::unique_ptr<alloc::Allocator> a;
  try {
    a = alloc::Allocator::create(opt, &err);
  } catch (...) {
    err = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (!a) {
    TIERRT_LOG(kError, "cannot start on device %d (%s); tierrt is off", dev, drv::result_name(err));
    g_off = true;
    return nullptr;
  }
  auto* e = new Engine(*g_settings, std::move(a), ctx);  // lives until exit
  const alloc::Stats st = e->alloc_->stats();
  TIERRT_LOG(kInfo, "started on device %d: mode %s, spill %s, device budget %llu MiB, host budget %llu MiB", dev,
             g_settings->mode == Mode::kTier ? "tier" : "observe",
             alloc::to_string(e->alloc_->mode()),
             static_cast<unsigned long long>(st.device_budget >> 20),
             static_cast<unsigned long long>(st.host_budget >> 20));
  pthread_atfork(nullptr, nullptr, &Engine::after_fork_in_child);
  std::atexit(&Engine::at_exit);
  g_active.store(e, std::memory_order_release);
  return e;
}

// A forked child has the parent's memory but not its driver threads: tierrt
// stands aside for the rest of the child's life and its calls go straight to
// the driver.
void Engine::after_fork_in_child() noexcept {
  g_off = true;
  g_active.store(nullptr, std::memory_order_release);
}

void Engine::at_exit() noexcept {
  Engine* e = active();
  if (!e) return;
  write_stats_report(*e);
  if (e->recorder_) e->recorder_->write();
}

void Engine::sample(SampleKind kind, std::uint64_t ptr, std::uint64_t bytes) noexcept {
  if (!recorder_ || !recorder_->samples_on()) return;
  const alloc::Stats s = alloc_->stats();
  recorder_->sample(kind, ptr, bytes, s.device_used, s.host_used);
}

void BlockList::add_more(alloc::Block* b) noexcept {
  try {
    if (more_.empty()) more_.assign(items_, items_ + n_);
    if (std::find(more_.begin(), more_.end(), b) == more_.end()) more_.push_back(b);
  } catch (...) {
    incomplete_ = true;
  }
}

void Engine::note_launch(const BlockList& blocks, CUstream stream) noexcept {
  const std::uint64_t seq = launches_.fetch_add(1, std::memory_order_relaxed);
  if (!recorder_ && !policy_) return;
  const policy::StreamId sid = recorder_ ? recorder_->stream_id(stream) : 0;
  if (recorder_ && recorder_->events_on()) recorder_->launch(seq, sid, blocks.span());
  if (policy_) {
    // Under capture, recording an event would put it into the graph.
    const bool timed = DeviceClock::due(seq) && !captures_.capturing(stream) && policy_->clock().record(seq, stream);
    policy_->post_launch(policy::Event::launch(seq, 0, sid), timed);
    for (alloc::Block* b : blocks.span()) policy_->post(policy::Event::use(b->va, seq, sid));
  }
  // Residency over time, every 256 launches: enough to draw, cheap to keep.
  if ((seq & 255) == 0) sample(SampleKind::kLaunches, 0, 0);
}

void Engine::note_step() noexcept {
  const std::uint64_t index = steps_.fetch_add(1, std::memory_order_relaxed);
  emit(policy::Event::step(index));
  sample(SampleKind::kStep, index, 0);
}

void Engine::note_phase(int phase) noexcept {
  emit(policy::Event::phase(static_cast<policy::Phase>(phase)));
  sample(SampleKind::kPhase, static_cast<std::uint64_t>(phase), 0);
}

void Engine::note_sync(CUstream stream, bool all_streams) noexcept {
  if (listening()) emit(policy::Event::sync(all_streams || !recorder_ ? policy::kAllStreams : recorder_->stream_id(stream)));
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

CUresult Engine::allocate(CUdeviceptr* out, size_t bytes, CUstream stream) noexcept {
  alloc::AllocFlags flags;
  flags.pass_through = captures_.capturing(stream);
  CUresult r = alloc_->allocate(out, bytes, stream, flags);
  if (r != CUDA_SUCCESS) return r;
  if (alloc::Block* b = alloc_->lookup(*out)) {
    add_live(static_cast<std::int64_t>(b->size));
    if (listening()) emit(policy::Event::alloc(b->va, b->size, recorder_ ? recorder_->stream_id(stream) : 0));
    sample(SampleKind::kAlloc, b->va, b->size);
  }
  return r;
}

bool Engine::free(CUdeviceptr ptr, CUstream stream, CUresult* result) noexcept {
  if (!alloc_->owns(ptr)) return false;
  alloc::Block* b = alloc_->lookup(ptr);
  size_t size = b && b->va == ptr ? b->size : 0;
  *result = alloc_->free(ptr, stream);
  if (*result == CUDA_SUCCESS && size) {
    add_live(-static_cast<std::int64_t>(size));
    if (listening()) emit(policy::Event::free(ptr, recorder_ ? recorder_->stream_id(stream) : 0));
    sample(SampleKind::kFree, ptr, size);
  }
  return true;
}

void Engine::collect_range(CUdeviceptr ptr, size_t bytes, BlockList& out) noexcept {
  if (alloc::Block* b = alloc_->lookup(ptr)) out.add(b);
  if (bytes > 1)
    if (alloc::Block* b = alloc_->lookup(ptr + bytes - 1)) out.add(b);
}

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

void Engine::virtual_meminfo(size_t* free_bytes, size_t* total_bytes) noexcept {
  const alloc::Stats s = alloc_->stats();
  const std::uint64_t total = s.device_budget + s.host_budget;
  const std::uint64_t used = s.device_used + s.host_used;
  *total_bytes = total;
  *free_bytes = used < total ? total - used : 0;
}

}  // namespace tierrt
