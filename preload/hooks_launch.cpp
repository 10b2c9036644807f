// Launch hooks: every 8-byte word of a launch's parameters is looked up in
// the block table; the blocks it names are made resident for the launch
// stream (or the stream waits on their prefetch), the launch goes out, and
// its use is recorded. No allocation, no logging, no lock across the call.
#include "preload/hooks.h"
#include "preload/hook_guard.h"
#include "preload/launch_path.h"

using namespace tierrt;
using namespace tierrt::preload;

namespace {

template <class Call>
CUresult launch(CUfunction f, CUstream stream, void** params, void** extra, Call&& call) noexcept {
  return launch_through(Engine::active(), f, stream, params, extra, call);
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
    auto call = [&] { return TIERRT_REAL(name, cuLaunchKernelEx)(cfg, f, params, extra); };  \
    if (!cfg) return call();                                                                  \
    return launch(f, stream_of(cfg->hStream), params, extra, call);                          \
  }
TIERRT_LAUNCH_EX_(cuLaunchKernelEx, TIERRT_SAME_)
TIERRT_LAUNCH_EX_(cuLaunchKernelEx_ptsz, ptsz)

}  // extern "C"
