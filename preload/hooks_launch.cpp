// Launch hooks: each is the engine's launch use case around the driver's own
// launch (the engine makes the blocks the parameters name resident for the
// launch stream and records their use). A graph launch replays work whose
// blocks stay resident; the engine counts it.
#include "hooks.h"
#include "engine_dispatch.h"
#include "runtime/engine.h"

using namespace tierrt;
using namespace tierrt::preload;

namespace {

template <class Forward>
CUresult launch(CUfunction f, CUstream stream, void** params, void** extra, Forward&& forward) noexcept {
  return launch_through_engines(f, stream, params, extra, forward);
}

}  // namespace

extern "C" {

#define TIERRT_LAUNCH_(name, stream_of)                                                               \
  CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
                unsigned shared, CUstream s, void** params, void** extra) {                          \
    return launch(f, stream_of(s), params, extra, [&] {                                              \
      return TIERRT_REAL(name, cuLaunchKernel)(f, gx, gy, gz, bx, by, bz, shared, s, params, extra); \
    });                                                                                               \
  }
#define TIERRT_SAME_(s) (s)
TIERRT_LAUNCH_(cuLaunchKernel, TIERRT_SAME_)
TIERRT_LAUNCH_(cuLaunchKernel_ptsz, ptsz)

#define TIERRT_LAUNCH_COOP_(name, stream_of)                                                           \
  CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
                unsigned shared, CUstream s, void** params) {                                         \
    return launch(f, stream_of(s), params, nullptr, [&] {                                            \
      return TIERRT_REAL(name, cuLaunchCooperativeKernel)(f, gx, gy, gz, bx, by, bz, shared, s, params); \
    });                                                                                               \
  }
TIERRT_LAUNCH_COOP_(cuLaunchCooperativeKernel, TIERRT_SAME_)
TIERRT_LAUNCH_COOP_(cuLaunchCooperativeKernel_ptsz, ptsz)

#define TIERRT_LAUNCH_EX_(name, stream_of)                                                    \
  CUresult name(const CUlaunchConfig* cfg, CUfunction f, void** params, void** extra) {     \
    auto forward = [&] { return TIERRT_REAL(name, cuLaunchKernelEx)(cfg, f, params, extra); }; \
    if (!cfg) return forward();                                                               \
    return launch(f, stream_of(cfg->hStream), params, extra, forward);                       \
  }
TIERRT_LAUNCH_EX_(cuLaunchKernelEx, TIERRT_SAME_)
TIERRT_LAUNCH_EX_(cuLaunchKernelEx_ptsz, ptsz)

#define TIERRT_GRAPH_LAUNCH_(name, stream_of)                                   \
  CUresult name(CUgraphExec exec, CUstream s) {                                 \
    auto forward = [&] { return TIERRT_REAL(name, cuGraphLaunch)(exec, s); };   \
    return through_engines([&](Engine& e, auto& next) { return e.graph_launch(exec, stream_of(s), next); }, forward); \
  }
TIERRT_GRAPH_LAUNCH_(cuGraphLaunch, TIERRT_SAME_)
TIERRT_GRAPH_LAUNCH_(cuGraphLaunch_ptsz, ptsz)

}  // extern "C"
