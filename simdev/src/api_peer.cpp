// Peer access between the simulated devices (SIMDEV_DEVICES,
// SIMDEV_PEER_ACCESS): who may access whose cuMemAlloc memory. VMM mappings
// are unaffected: their access is only what cuMemSetAccess grants.
#include "state.h"

using namespace simdev;

namespace {

bool can_access_peer(CUdevice dev, CUdevice peer) { return dev != peer && state().config.peer_access; }

// The devices that may now access `owner`'s cuMemAlloc memory: its pages
// follow. The caller holds ctx_mu.
void refresh_locked(Context* owner) {
  state().memory.set_memalloc_access(owner, memalloc_access_mask_locked(owner));
}

}  // namespace

namespace simdev {
void forget_peer_access_locked(Context* gone) {
  for (Context* owner : gone->peers) refresh_locked(owner);
  gone->peers.clear();
}
}  // namespace simdev

SIMDEV_API CUresult CUDAAPI cuDeviceCanAccessPeer(int* can_access, CUdevice dev, CUdevice peer) {
  SIMDEV_ENTER("cuDeviceCanAccessPeer", CUDA_ERROR_INVALID_DEVICE);
  if (!can_access) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev) || !valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
  *can_access = can_access_peer(dev, peer);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  SIMDEV_ENTER_CTX("cuCtxEnablePeerAccess", CUDA_ERROR_TOO_MANY_PEERS, ctx);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.ctx_mu);
  auto* p = reinterpret_cast<Context*>(peer);
  if (!peer || !s.contexts.count(p) || p == ctx) return CUDA_ERROR_INVALID_CONTEXT;
  // A context of the same device is no peer: cuDeviceCanAccessPeer says 0.
  if (!can_access_peer(ctx->device, p->device)) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  if (!ctx->peers.insert(p).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  refresh_locked(p);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer) {
  SIMDEV_ENTER_CTX("cuCtxDisablePeerAccess", CUDA_ERROR_INVALID_CONTEXT, ctx);
  State& s = state();
  std::lock_guard lock(s.ctx_mu);
  auto* p = reinterpret_cast<Context*>(peer);
  if (!peer || !s.contexts.count(p)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!ctx->peers.erase(p)) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  refresh_locked(p);
  return CUDA_SUCCESS;
}

SIMDEV_API CUresult CUDAAPI cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attr, CUdevice src,
                                                    CUdevice dst) {
  SIMDEV_ENTER("cuDeviceGetP2PAttribute", CUDA_ERROR_INVALID_DEVICE);
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(src) || !valid_device(dst)) return CUDA_ERROR_INVALID_DEVICE;
  // A device is not its own peer (the code for src == dst is UNCONFIRMED).
  if (src == dst) return CUDA_ERROR_INVALID_DEVICE;
  const bool peer = can_access_peer(src, dst);
  switch (attr) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *value = 0; break;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED: *value = peer; break;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED: *value = peer; break;
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = peer; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
