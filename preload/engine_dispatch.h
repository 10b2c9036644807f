// Which of the process's engines (one per device, runtime/engine_registry)
// a hook talks to. With one engine every hook talks to it, as before there
// were several; with more:
// - work a stream runs (launches, copies, graphs, collectives) passes
//   through every engine, each making its own blocks resident around the
//   driver's call (a copy or a peer's kernel may touch any device's
//   memory), the driver's call made once, innermost;
// - a pointer goes to the engine whose memory holds it;
// - an allocation goes to the current context's engine.
#pragma once

#include <cuda.h>

#include "runtime/engine.h"

namespace tierrt::preload {

// The driver's call, or the next engine's part around it, without
// allocating: a reference to a callable that outlives the call.
class ForwardRef {
 public:
  template <class F>
  explicit ForwardRef(F& f) noexcept : obj_(&f), fn_([](void* o) -> CUresult { return (*static_cast<F*>(o))(); }) {}
  CUresult operator()() const noexcept { return fn_(obj_); }

 private:
  void* obj_;
  CUresult (*fn_)(void*);
};

namespace detail {
template <class Call>
CUresult chain(int i, int n, Call& call, const ForwardRef& last) noexcept {
  if (i == n) return last();
  auto next = [&]() noexcept { return chain(i + 1, n, call, last); };
  ForwardRef ref(next);
  return call(*Engine::at(i), ref);
}
}  // namespace detail

// call(engine, forward) through every engine, each wrapping the next; the
// driver's call last. Without an engine, only forward().
template <class Call, class Forward>
CUresult through_engines(Call&& call, Forward&& forward) noexcept {
  const int n = Engine::count();
  if (n == 0) return forward();
  if (n == 1) return call(*Engine::active(), forward);
  ForwardRef last(forward);
  return detail::chain(0, n, call, last);
}

// fn(engine) for every engine.
template <class Fn>
void each_engine(Fn&& fn) noexcept {
  for (int i = 0, n = Engine::count(); i < n; ++i) fn(*Engine::at(i));
}

// A launch on the current context's stream: its own engine sees a launch;
// an engine another device reaches through peer access sees a peer's
// launch; the rest cannot be reached by it and are skipped.
template <class Forward>
CUresult launch_through_engines(CUfunction f, CUstream stream, void** params, void** extra, Forward&& forward) noexcept {
  if (Engine* e = Engine::sole()) return e->launch(f, stream, params, extra, forward);
  if (Engine::count() == 0) return forward();
  const Engine* home = Engine::current();
  return through_engines(
      [&](Engine& e, auto& next) noexcept -> CUresult {
        if (&e == home) return e.launch(f, stream, params, extra, next);
        if (e.reachable_by_peers()) return e.peer_launch(f, stream, params, extra, next);
        return next();
      },
      forward);
}

// The engine of the current context (what a context-wide call concerns);
// the only one when one runs.
inline Engine* engine_here() noexcept {
  if (Engine* e = Engine::sole()) return e;
  return Engine::current();
}

// A free: the engine whose memory holds `p`; else the current context's,
// which forgets `p` if it passed it through to the driver (an allocation
// made under capture) before the driver frees it.
inline Engine* freeing_engine(CUdeviceptr p) noexcept {
  if (Engine* e = Engine::owning(p)) return e;
  return engine_here();
}

}  // namespace tierrt::preload
