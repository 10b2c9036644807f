// A kernel launch checked and packed into stream work: what cuLaunchKernel
// enqueues once its entry checks passed, shared with graph launches so that
// a graph's kernel nodes run without going through an exported entry point
// (which fault injection counts, and which a preloaded library would see as
// a launch of the application's).
#pragma once

#include "common.h"
#include "stream.h"

namespace simdev {

// Checks the function, dimensions and parameters (from `params` or
// `extra`, as cuLaunchKernel takes them) and fills `out` with the work that
// runs the kernel.
CUresult prepare_kernel(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned shared, void** params,
                        void** extra, Work* out);

}  // namespace simdev
