// Peer access: enabling it lets the current context's device reach the
// peer context's cuMemAlloc memory, but not VMM mappings, which tierrt's
// memory is. Once the driver agreed, the peer's engine maps its memory for
// this device too (cuMemSetAccess), so that what worked without tierrt
// works with it.
#include "hooks.h"
#include "runtime/engine.h"

using namespace tierrt;
using namespace tierrt::preload;

extern "C" {

CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags) {
  const CUresult r = TIERRT_REAL(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess)(peer, flags);
  // Already enabled: granted when it was (or, if that was before tierrt ran, now).
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) Engine::peer_access_enabled(peer);
  return r;
}

}  // extern "C"
