// tierrt.h: what a framework may tell tierrt and ask of it. Safe at any
// time: without a running engine the calls do nothing (or return -1).
#include "tierrt/tierrt.h"

#include "runtime/engine.h"

using namespace tierrt;

extern "C" {

const char* tierrt_version(void) { return TIERRT_VERSION; }

void tierrt_mark_step(void) {
  for (int i = 0, n = Engine::count(); i < n; ++i) Engine::at(i)->note_step();
}

void tierrt_mark_phase(tierrt_phase phase) {
  for (int i = 0, n = Engine::count(); i < n; ++i) Engine::at(i)->note_phase(static_cast<int>(phase));
}

int tierrt_advise(const void* ptr, tierrt_advice advice) {
  Engine* e = Engine::owning(reinterpret_cast<CUdeviceptr>(ptr));
  return e && e->advise(reinterpret_cast<CUdeviceptr>(ptr), advice) ? 0 : -1;
}

// With an engine per device: the current context's device's, else the first.
int tierrt_get_stats(tierrt_stats* out) {
  Engine* e = Engine::count() > 1 && Engine::current() ? Engine::current() : Engine::active();
  if (!e || !out) return -1;
  e->public_stats(out);
  return 0;
}

}  // extern "C"
