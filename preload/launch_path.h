// The launch path itself, shared by the launch hooks and the benchmark that
// measures them: blocks named by the parameters become resident for the
// stream, the launch goes out, its use is recorded.
#pragma once

#include "runtime/engine.h"

namespace tierrt::preload {

template <class Call>
inline CUresult launch_through(Engine* e, CUfunction f, CUstream stream, void** params, void** extra,
                               Call&& call) noexcept {
  if (!e) return call();
  BlockList blocks;
  e->collect_launch(f, params, extra, blocks);
  if (blocks.empty()) {
    CUresult r = call();
    if (r == CUDA_SUCCESS) e->note_launch(blocks, stream);
    return r;
  }
  if (CUresult r = e->before_use(blocks, stream)) return r;
  CUresult r = call();
  e->after_use(blocks, stream, r == CUDA_SUCCESS);
  if (r == CUDA_SUCCESS) e->note_launch(blocks, stream);
  return r;
}

}  // namespace tierrt::preload
