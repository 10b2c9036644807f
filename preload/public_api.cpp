// tierrt.h: what a framework may tell tierrt and ask of it. Safe at any
// time: without a running engine the calls do nothing (or return -1).
#include "include/tierrt/tierrt.h"

#include "runtime/engine.h"
#include "runtime/stats_report.h"

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
  if (!e) return -1;
  alloc::Allocator& a = e->allocator();
  alloc::Block* b = a.lookup(reinterpret_cast<CUdeviceptr>(ptr));
  if (!b) return -1;
  alloc::Block* one[] = {b};
  switch (advice) {
    case TIERRT_ADVISE_SPILL: {
      alloc::SpillResult r = a.spill(b);
      return r == alloc::SpillResult::Started || r == alloc::SpillResult::AlreadyMoving ? 0 : -1;
    }
    case TIERRT_ADVISE_PREFETCH: return a.prefetch(b, nullptr) == CUDA_SUCCESS ? 0 : -1;
    // A pin is a residency request that is not released until unpinned.
    case TIERRT_ADVISE_PIN: return a.ensure_resident(one, CU_STREAM_LEGACY) == CUDA_SUCCESS ? 0 : -1;
    case TIERRT_ADVISE_UNPIN:
      if (b->pins.load() == 0) return -1;
      a.release(one);
      return 0;
  }
  return -1;
}

int tierrt_get_stats(tierrt_stats* out) {
  Engine* e = Engine::active();
  if (!e || !out) return -1;
  fill_public_stats(*e, out);
  return 0;
}

}  // extern "C"
