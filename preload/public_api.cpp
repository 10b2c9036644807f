// tierrt.h: what a framework may tell tierrt and ask of it. Safe at any
// time: without a running engine the calls do nothing (or return -1).
#include "tierrt/tierrt.h"

#include "runtime/engine.h"

using namespace tierrt;

extern "C" {

const char* tierrt_version(void) { return TIERRT_VERSION; }

void tierrt_mark_step(void) {
  if (Engine* e = Engine::active()) e->note_step();
}

void tierrt_mark_phase(tierrt_phase phase) {
  if (Engine* e = Engine::active()) e->note_phase(static_cast<int>(phase));
}

int tierrt_advise(const void* ptr, tierrt_advice advice) {
  Engine* e = Engine::active();
  return e && e->advise(reinterpret_cast<CUdeviceptr>(ptr), advice) ? 0 : -1;
}

int tierrt_get_stats(tierrt_stats* out) {
  Engine* e = Engine::active();
  if (!e || !out) return -1;
  e->public_stats(out);
  return 0;
}

}  // extern "C"
