// The handles of loaded code, kept apart as NVIDIA's driver keeps them:
// a CUmodule hands out CUfunctions; a CUlibrary hands out CUkernels, which
// are context-independent and are not CUfunctions; cuKernelGetFunction gives
// a CUkernel's CUfunction for one context. Unloading a module or a library
// invalidates every handle it gave out, and a later handle may reuse the
// address of an invalidated one, as with the driver.
#pragma once

#include "common.h"
#include "kernel_registry.h"

namespace simdev {

struct Context;

CUresult load_module(CUmodule* out);
CUresult unload_module(CUmodule m);
CUresult module_function(CUmodule m, const char* name, CUfunction* out);

CUresult load_library(CUlibrary* out);
CUresult unload_library(CUlibrary lib);
CUresult library_kernel(CUlibrary lib, const char* name, CUkernel* out);
CUresult kernel_function(CUkernel k, Context* ctx, CUfunction* out);

// What a live handle of that kind names; null for anything else.
const Function* function_of(CUfunction f);
const Function* function_of_kernel(CUkernel k);
// What cuLaunchKernel and the occupancy queries take: a CUfunction, or a
// CUkernel cast to one (documented for cuLaunchKernel).
const Function* launchable_function(CUfunction f);

}  // namespace simdev
