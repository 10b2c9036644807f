// The shape every data-touching hook shares: find the tracked blocks the
// call names, make them resident for the call's stream, make the call,
// record the use. Without a running engine, or when nothing tracked is
// named, the call goes straight to the driver.
#pragma once

#include "runtime/engine.h"

namespace tierrt::preload {

template <class Collect, class Call>
inline CUresult guarded_call(CUstream stream, Collect&& collect, Call&& call) noexcept {
  Engine* e = Engine::active();
  if (!e) return call();
  BlockList blocks;
  collect(*e, blocks);
  if (blocks.empty()) return call();
  if (CUresult r = e->before_use(blocks, stream)) return r;
  CUresult r = call();
  e->after_use(blocks, stream, r == CUDA_SUCCESS);
  return r;
}

// The stream a call without a stream argument runs on.
inline CUstream legacy_default() noexcept { return CU_STREAM_LEGACY; }
inline CUstream per_thread_default() noexcept { return CU_STREAM_PER_THREAD; }
// The _ptsz forms read the NULL stream as the per-thread stream.
inline CUstream ptsz(CUstream s) noexcept { return s ? s : CU_STREAM_PER_THREAD; }

}  // namespace tierrt::preload
