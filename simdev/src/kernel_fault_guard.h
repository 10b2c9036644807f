// Host kernels dereference device addresses directly, as GPU code does, so a
// kernel touching device address space that has nothing mapped (or lacks the
// access it needs) raises SIGSEGV or SIGBUS on its stream's worker. The guard
// turns that into what a GPU reports, CUDA_ERROR_ILLEGAL_ADDRESS, at that
// access: the kernel is abandoned there. A fault anywhere else goes to the
// handler that was installed before simdev's, so the application's own
// crashes still crash.
#pragma once

#include "common.h"
#include "simdev/simdev.h"

namespace simdev {

// Runs fn on the calling thread; ILLEGAL_ADDRESS when it faulted on device
// address space (the rest of the kernel does not run, as on a GPU), with the
// faulting address in *fault_address when it is not null.
CUresult run_guarded_kernel(simdev_kernel_fn fn, const simdev_launch* launch, uint64_t* fault_address = nullptr);

}  // namespace simdev
