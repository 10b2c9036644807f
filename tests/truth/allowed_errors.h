// What the driver documents each call may return, for a program whose
// arguments are valid and whose context is current (so not DEINITIALIZED,
// NOT_INITIALIZED or INVALID_CONTEXT), leaving out the sticky errors: an
// error outside this table is one tierrt made up.
#pragma once

#include <cuda.h>

namespace truth {

enum class Call {
  kMemAlloc, kMemAllocAsync, kMemFree, kMemFreeAsync,
  kCopy, kCopyAsync, kMemset, kMemsetAsync,
  kLaunchKernel,
  kStreamSynchronize, kStreamWaitEvent, kEventCreate, kEventRecord, kEventSynchronize,
  kBeginCapture, kEndCapture, kGraphInstantiate, kGraphLaunch,
};

const char* call_name(Call c);

bool driver_documents(Call c, CUresult r);

// The driver functions whose next call the program may make fail: its own
// and those tierrt makes on its behalf (mapping, spill and fetch copies,
// use events). Names as simdev counts them.
extern const char* const kFaultTargets[];
extern const unsigned kFaultTargetCount;

}  // namespace truth
