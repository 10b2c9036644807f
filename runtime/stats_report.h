// What tierrt reports about itself: the public stats struct and the summary
// TIERRT_STATS writes at exit.
#pragma once

#include "tierrt/tierrt.h"

namespace tierrt {

class Engine;

void fill_public_stats(const Engine& e, tierrt_stats* out) noexcept;
// Writes the summary where TIERRT_STATS says ("-": stderr); no-op when unset.
void write_stats_report(const Engine& e) noexcept;

}  // namespace tierrt
