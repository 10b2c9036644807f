// The process's engines: one per device the application allocates on,
// started by the first allocation there and kept until exit, and which
// device may reach which one's memory (peer access).
#include <pthread.h>

#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "driver/driver.h"
#include "log.h"
#include "node_ledger.h"
#include "process_host_share.h"
#include "runtime/config.h"
#include "runtime/engine.h"

namespace tierrt {

std::atomic<Engine*> Engine::g_engines[Engine::kMaxEngines]{};
std::atomic<int> Engine::g_count{0};

namespace {

RankedMutex g_start_mu{kRankStart, "runtime.start"};
bool g_settings_read = false;
bool g_off = false;  // decided for the whole process: off, bad settings, or no driver
Settings* g_settings = nullptr;
// Bit p of g_peers[d]: device p was given peer access to device d's memory
// (whether or not d's engine has started yet).
std::atomic<std::uint64_t> g_peers[Engine::kMaxEngines]{};

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
  if (s->mode == Mode::Off) g_off = true;
  return !g_off;
}

// One host budget for all of the process's engines: the first engine's
// (the settings are the process's), within the node ledger's if any.
alloc::HostShare* process_host_share(const Settings& s, std::uint64_t host_budget) {
  static ProcessHostShare* share = new ProcessHostShare(host_budget, process_node_ledger(s));
  return share;
}

// The settings of device `dev`'s engine: the process's, with output names
// of its own (%d, or ".devN" for every engine after the first).
Settings settings_for_device(const Settings& s, int dev, bool first) {
  Settings d = s;
  for (std::string* path : {&d.stats, &d.trace, &d.record, &d.plot})
    *path = config::device_output_path(*path, dev, !first);
  return d;
}

int device_of(CUcontext ctx) noexcept {
  CUcontext saved = nullptr;
  CUdevice dev = -1;
  if (TIERRT_CU(cuCtxGetCurrent, &saved) != CUDA_SUCCESS) return -1;
  if (saved == ctx) return TIERRT_CU(cuCtxGetDevice, &dev) == CUDA_SUCCESS ? dev : -1;
  if (TIERRT_CU(cuCtxPushCurrent, ctx) != CUDA_SUCCESS) return -1;
  if (TIERRT_CU(cuCtxGetDevice, &dev) != CUDA_SUCCESS) dev = -1;
  CUcontext popped = nullptr;
  (void)TIERRT_CU(cuCtxPopCurrent, &popped);
  return dev;
}

Engine* engine_of_device(int dev) noexcept {
  for (int i = 0, n = Engine::count(); i < n; ++i)
    if (Engine* e = Engine::at(i); e->device_ordinal() == dev) return e;
  return nullptr;
}

}  // namespace

Engine* Engine::owning(CUdeviceptr p) noexcept {
  if (Engine* e = sole()) return e->alloc_->owns(p) ? e : nullptr;
  for (int i = 0, n = count(); i < n; ++i)
    if (Engine* e = at(i); e->alloc_->owns(p)) return e;
  return nullptr;
}

Engine* Engine::current() noexcept {
  CUcontext ctx = nullptr;
  if (count() == 0 || TIERRT_CU(cuCtxGetCurrent, &ctx) != CUDA_SUCCESS || !ctx) return nullptr;
  for (int i = 0, n = count(); i < n; ++i)
    if (Engine* e = at(i); e->ctx_ == ctx) return e;
  return nullptr;
}

Engine* Engine::start() noexcept {
  CUdevice dev = -1;
  CUcontext ctx = nullptr;
  const bool have_context = count() == 0 || (TIERRT_CU(cuCtxGetCurrent, &ctx) == CUDA_SUCCESS && ctx &&
                                              TIERRT_CU(cuCtxGetDevice, &dev) == CUDA_SUCCESS);
  if (count() > 0) {
    if (!have_context) return active();
    if (Engine* e = engine_of_device(dev)) return e;
  }
  std::lock_guard lock(g_start_mu);
  if (!read_once()) return nullptr;
  if (!drv::loaded()) {
    TIERRT_LOG(Error, "libcuda.so.1 could not be loaded; tierrt is off");
    g_off = true;
    return nullptr;
  }
  if (TIERRT_CU(cuCtxGetCurrent, &ctx) != CUDA_SUCCESS || !ctx) return active();  // try again with a context
  if (TIERRT_CU(cuCtxGetDevice, &dev) != CUDA_SUCCESS) return active();
  if (Engine* e = engine_of_device(dev)) return e;
  const int n = count();
  if (n == kMaxEngines || dev < 0 || dev >= kMaxEngines) {
    TIERRT_LOG(Warn, "device %d is not tiered: tierrt runs at most %d engines, for devices 0..%d", dev, kMaxEngines,
               kMaxEngines - 1);
    return nullptr;
  }
  CUresult err = CUDA_SUCCESS;
  Engine* e = create(settings_for_device(*g_settings, dev, n == 0), &err, &process_host_share).release();
  if (!e) {
    TIERRT_LOG(Error, "cannot start on device %d (%s); tierrt is off%s", dev, drv::result_name(err),
               n == 0 ? "" : " for that device");
    if (n == 0) g_off = true;
    return nullptr;
  }
  for (std::uint64_t peers = g_peers[dev].load(std::memory_order_acquire); peers != 0; peers &= peers - 1)
    e->grant_peer(std::countr_zero(peers));
  if (n == 0) {
    pthread_atfork(nullptr, nullptr, &Engine::after_fork_in_child);
    std::atexit(&Engine::at_exit);
  }
  g_engines[n].store(e, std::memory_order_release);
  g_count.store(n + 1, std::memory_order_release);
  return e;
}

Engine* Engine::for_allocation() noexcept {
  Engine* e = start();
  return e && e->on_engine_context() ? e : nullptr;
}

bool Engine::make_device_current(int ordinal) noexcept {
  CUdevice current = -1;
  if (TIERRT_CU(cuCtxGetDevice, &current) == CUDA_SUCCESS && current == ordinal) return true;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  return TIERRT_CU(cuDeviceGet, &dev, ordinal) == CUDA_SUCCESS &&
         TIERRT_CU(cuDevicePrimaryCtxRetain, &ctx, dev) == CUDA_SUCCESS && TIERRT_CU(cuCtxSetCurrent, ctx) == CUDA_SUCCESS;
}

void Engine::peer_access_enabled(CUcontext peer) noexcept {
  CUdevice reader = -1;
  const int owner = device_of(peer);
  if (owner < 0 || owner >= kMaxEngines || TIERRT_CU(cuCtxGetDevice, &reader) != CUDA_SUCCESS || reader < 0 ||
      reader >= kMaxEngines || reader == owner)
    return;
  g_peers[owner].fetch_or(std::uint64_t{1} << reader, std::memory_order_acq_rel);
  // An engine that starts after this reads g_peers under the start lock.
  std::lock_guard lock(g_start_mu);
  if (Engine* e = engine_of_device(owner)) e->grant_peer(reader);
}

void Engine::grant_peer(int device) noexcept {
  if (!alloc_->grant_peer(device))
    TIERRT_LOG(Warn, "device %d enabled peer access to device %d, but some of tierrt's memory there could not be "
                     "mapped for it; kernels of device %d may fault on it",
               device, device_ordinal_, device);
  peers_granted_.store(true, std::memory_order_release);
}

// A forked child has the parent's memory but not its driver threads: tierrt
// stands aside for the rest of the child's life and its calls go straight to
// the driver.
void Engine::after_fork_in_child() noexcept {
  g_off = true;
  g_count.store(0, std::memory_order_release);
  for (auto& e : g_engines) e.store(nullptr, std::memory_order_release);
}

void Engine::at_exit() noexcept {
  for (int i = 0, n = count(); i < n; ++i) at(i)->write_outputs();
}

}  // namespace tierrt
