// Fault injection: the nth call of a named function fails with an error that
// function documents. Counted per function (all of its exported forms,
// e.g. _ptsz, count under the current name), from the moment it is armed.
#pragma once

#include <atomic>
#include <string>

#include "common.h"

namespace simdev {

class FaultSite {
 public:
  // `resource_error` is what the function answers when a resource runs out.
  FaultSite(const char* name, CUresult resource_error);

  // CUDA_SUCCESS, or the injected error for this call.
  CUresult hit() {
    if (!armed_any().load(std::memory_order_relaxed)) return CUDA_SUCCESS;
    return hit_slow();
  }

  static std::atomic<bool>& armed_any();

 private:
  CUresult hit_slow();
  const char* name_;
  CUresult resource_error_;
};

// Arms "name:nth[,name:nth...]" (names must be functions simdev implements).
// Returns an empty string, or a one-line error.
std::string arm_faults_from_spec(const std::string& spec);
// `pause`: the nth call waits (before doing anything) until release_pauses(),
// instead of failing: a test holds one thread at a chosen driver call.
bool arm_fault(const std::string& name, unsigned long long nth, int error, bool pause);
// Whether a call is held by a pause, waiting up to `ms` for one.
bool wait_paused(unsigned long long ms);
// Every call held now goes on.
void release_pauses();
void clear_faults();
// How many armed faults have made their call fail since the process began.
unsigned long long faults_fired();

}  // namespace simdev

// Entry check of every exported function: fault injection first.
#define SIMDEV_FAULT_POINT(name, resource_error)                      \
  do {                                                                \
    static ::simdev::FaultSite simdev_site_(name, resource_error);    \
    if (CUresult simdev_e_ = simdev_site_.hit()) return simdev_e_;    \
  } while (0)
