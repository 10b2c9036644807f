// Process-wide state of the simulated driver: its devices (SIMDEV_DEVICES),
// their contexts, the memory, the copy engines, and the sticky error that
// poisons a context.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "address_space.h"
#include "config.h"
#include "copy_engine.h"
#include "faults.h"

namespace simdev {

class Stream;

struct Context {
  int device = 0;
  bool primary = false;
  unsigned flags = 0;
  unsigned long long id = 0;
  std::shared_ptr<Stream> legacy_stream;  // the NULL stream's legacy form
  // Contexts whose cuMemAlloc memory this one's kernels may access
  // (cuCtxEnablePeerAccess); guarded by State::ctx_mu.
  std::set<Context*> peers;
};

struct State {
  Config config;
  std::string config_error;
  std::atomic<bool> initialized{false};
  // A child forked after cuInit: the driver's state did not come along.
  std::atomic<bool> forked_child{false};
  std::atomic<int> sticky{CUDA_SUCCESS};

  std::mutex ctx_mu;
  // Each device's primary context.
  Context* primary[kMaxDevices] = {};
  int primary_refs[kMaxDevices] = {};
  unsigned primary_flags[kMaxDevices] = {};
  std::set<Context*> contexts;  // live ones, primary included
  unsigned long long next_ctx_id = 1;

  AddressSpace memory;
  CopyEngine h2d, d2h;
};

// Never destroyed: worker threads may use it until the process exits.
State& state();

// SIMDEV_DEVICES: how many devices there are.
inline int device_count() { return state().config.devices; }
inline bool valid_device(CUdevice d) { return d >= 0 && d < device_count(); }

CUresult check_initialized();

// A thread's stack of current contexts. Trivially destructible: a static
// destructor of the application's that runs after the main thread's
// thread_local objects are gone (at exit) still finds its current context,
// as it does with the driver. Nesting deeper than kDepth is refused.
class ContextStack {
 public:
  static constexpr int kDepth = 64;
  bool empty() const { return n_ == 0; }
  bool full() const { return n_ == kDepth; }
  Context*& back() { return at_[n_ - 1]; }
  void push_back(Context* c) { at_[n_++] = c; }
  void pop_back() { --n_; }
  Context** begin() { return at_; }
  Context** end() { return at_ + n_; }

 private:
  Context* at_[kDepth];
  int n_;
};
ContextStack& context_stack();
// The calling thread's current context; INVALID_CONTEXT when none; the
// sticky error once the context is poisoned.
CUresult current_context(Context** out);
void raise_sticky_error(CUresult e);
bool valid_context(CUcontext c);

// Device attribute as a simulated device (an H200-like part) answers it.
CUresult device_attribute(CUdevice_attribute attr, int* value, CUdevice dev = 0);

// The devices whose kernels may access cuMemAlloc memory of `owner` (a bit
// per device): its own, and those with a context that enabled peer access
// to it. The caller holds ctx_mu.
unsigned memalloc_access_mask_locked(const Context* owner);
// A context is destroyed: the memory it had peer access to loses its
// device's access (unless another context of that device has it too).
void forget_peer_access_locked(Context* gone);

}  // namespace simdev

// Entry of every exported function: initialised, then fault injection.
#define SIMDEV_ENTER(name, resource_error)                                 \
  do {                                                                     \
    if (CUresult simdev_init_ = ::simdev::check_initialized()) return simdev_init_; \
    SIMDEV_FAULT_POINT(name, resource_error);                              \
  } while (0)

// ... plus a current, healthy context, bound to `ctx`.
#define SIMDEV_ENTER_CTX(name, resource_error, ctx)                        \
  SIMDEV_ENTER(name, resource_error);                                      \
  ::simdev::Context* ctx = nullptr;                                        \
  if (CUresult simdev_ctx_ = ::simdev::current_context(&ctx)) return simdev_ctx_
