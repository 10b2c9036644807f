// Primary and created contexts, and the calling thread's current context.
#include <vector>

#include "capture.h"
#include "state.h"
#include "stream.h"

using namespace simdev;

namespace {

Context* new_context(CUdevice dev, bool primary, unsigned flags) {
  State& s = state();
  auto* c = new Context;
  c->device = dev;
  c->primary = primary;
  c->flags = flags;
  c->id = s.next_ctx_id++;
  s.contexts.insert(c);
  return c;
}

void set_current(Context* c) {
  auto& stack = context_stack();
  if (stack.empty()) stack.push_back(c);  // never full when empty
  else stack.back() = c;
}

bool valid_flags(unsigned flags) {
  unsigned sched = flags & CU_CTX_SCHED_MASK;
  return sched <= CU_CTX_SCHED_BLOCKING_SYNC && (flags & ~(CU_CTX_FLAGS_MASK)) == 0;
}

}  // namespace

SIMDEV_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  SIMDEV_ENTER("cuDevicePrimaryCtxRetain", CUDA_ERROR_OUT_OF_MEMORY);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard lock(s.ctx_mu);
  if (!s.primary[dev]) s.primary[dev] = new_context(dev, true, s.primary_flags[dev]);
  ++s.primary_refs[dev];
  *pctx = reinterpret_cast<CUcontext>(s.primary[dev]);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  SIMDEV_ENTER("cuDevicePrimaryCtxRelease_v2", CUDA_ERROR_INVALID_CONTEXT);
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard lock(s.ctx_mu);
  if (s.primary_refs[dev] == 0) return CUDA_ERROR_INVALID_CONTEXT;
  // The context object stays valid (threads may still name it); only its
  // reference count drops, as the driver keeps it until the count is 0.
  --s.primary_refs[dev];
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  SIMDEV_ENTER("cuDevicePrimaryCtxReset_v2", CUDA_ERROR_INVALID_CONTEXT);
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  synchronize_context(nullptr);
  // A reset is how a poisoned context comes back to life.
  s.sticky.store(CUDA_SUCCESS);
  std::lock_guard lock(s.ctx_mu);
  s.primary_refs[dev] = 0;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  SIMDEV_ENTER("cuDevicePrimaryCtxGetState", CUDA_ERROR_INVALID_DEVICE);
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard lock(s.ctx_mu);
  *flags = s.primary_flags[dev];
  *active = s.primary_refs[dev] > 0;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  SIMDEV_ENTER("cuDevicePrimaryCtxSetFlags_v2", CUDA_ERROR_INVALID_VALUE);
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!valid_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.ctx_mu);
  s.primary_flags[dev] = flags;
  if (s.primary[dev]) s.primary[dev]->flags = flags;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  SIMDEV_ENTER("cuCtxCreate_v4", CUDA_ERROR_OUT_OF_MEMORY);
  if (!pctx || !valid_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  if (params && (params->execAffinityParams || params->cigParams)) return CUDA_ERROR_NOT_SUPPORTED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (context_stack().full()) return CUDA_ERROR_OUT_OF_MEMORY;
  Context* c;
  {
    State& s = state();
    std::lock_guard lock(s.ctx_mu);
    c = new_context(dev, false, flags);
  }
  context_stack().push_back(c);  // a new context is pushed onto the caller's stack
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v4(pctx, nullptr, flags, dev);
}

SIMDEV_API CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  SIMDEV_ENTER("cuCtxDestroy_v2", CUDA_ERROR_INVALID_CONTEXT);
  auto* c = reinterpret_cast<Context*>(ctx);
  State& s = state();
  {
    std::lock_guard lock(s.ctx_mu);
    if (!s.contexts.count(c) || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  }
  synchronize_context(c);
  {
    std::lock_guard lock(s.ctx_mu);
    s.contexts.erase(c);  // the object itself is kept: stale handles stay harmless
    // Peer access to it goes with it (its memory went too), and its own.
    for (Context* other : s.contexts) other->peers.erase(c);
    forget_peer_access_locked(c);
  }
  for (Context*& entry : context_stack())
    if (entry == c) entry = nullptr;
  while (!context_stack().empty() && !context_stack().back()) context_stack().pop_back();
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  SIMDEV_ENTER("cuCtxSetCurrent", CUDA_ERROR_INVALID_CONTEXT);
  if (ctx && !valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!ctx) {
    if (!context_stack().empty()) context_stack().pop_back();
    return CUDA_SUCCESS;
  }
  set_current(reinterpret_cast<Context*>(ctx));
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  SIMDEV_ENTER("cuCtxGetCurrent", CUDA_ERROR_INVALID_CONTEXT);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  auto& stack = context_stack();
  *pctx = stack.empty() ? nullptr : reinterpret_cast<CUcontext>(stack.back());
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  SIMDEV_ENTER("cuCtxPushCurrent_v2", CUDA_ERROR_INVALID_CONTEXT);
  if (!ctx || !valid_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (context_stack().full()) return CUDA_ERROR_OUT_OF_MEMORY;
  context_stack().push_back(reinterpret_cast<Context*>(ctx));
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
  SIMDEV_ENTER("cuCtxPopCurrent_v2", CUDA_ERROR_INVALID_CONTEXT);
  auto& stack = context_stack();
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  SIMDEV_ENTER_CTX("cuCtxGetDevice", CUDA_ERROR_INVALID_CONTEXT, ctx);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice* device, CUcontext c) {
  if (!c) return cuCtxGetDevice(device);
  SIMDEV_ENTER("cuCtxGetDevice_v2", CUDA_ERROR_INVALID_CONTEXT);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_context(c)) return CUDA_ERROR_INVALID_CONTEXT;
  *device = reinterpret_cast<Context*>(c)->device;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxGetFlags(unsigned int* flags) {
  SIMDEV_ENTER_CTX("cuCtxGetFlags", CUDA_ERROR_INVALID_CONTEXT, ctx);
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  *flags = ctx->flags;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxGetId(CUcontext c, unsigned long long* id) {
  SIMDEV_ENTER("cuCtxGetId", CUDA_ERROR_INVALID_CONTEXT);
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = reinterpret_cast<Context*>(c);
  if (!c) {
    if (CUresult e = current_context(&ctx)) return e;
  } else if (!valid_context(c)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *id = ctx->id;
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxGetApiVersion(CUcontext c, unsigned int* version) {
  SIMDEV_ENTER("cuCtxGetApiVersion", CUDA_ERROR_INVALID_CONTEXT);
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  if (c && !valid_context(c)) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 3020;  // the driver reports the context ABI, unchanged since 3.2
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxSynchronize() {
  SIMDEV_ENTER_CTX("cuCtxSynchronize", CUDA_ERROR_INVALID_CONTEXT, ctx);
  if (CUresult e = refuse_context_sync_during_capture(ctx)) return e;
  return synchronize_context(ctx);
}

SIMDEV_API CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext c) {
  if (!c) return cuCtxSynchronize();
  SIMDEV_ENTER("cuCtxSynchronize_v2", CUDA_ERROR_INVALID_CONTEXT);
  if (!valid_context(c)) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult e = refuse_context_sync_during_capture(reinterpret_cast<Context*>(c))) return e;
  return synchronize_context(reinterpret_cast<Context*>(c));
}

SIMDEV_API CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  SIMDEV_ENTER_CTX("cuCtxGetStreamPriorityRange", CUDA_ERROR_INVALID_CONTEXT, ctx);
  (void)ctx;
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return CUDA_SUCCESS;
}
