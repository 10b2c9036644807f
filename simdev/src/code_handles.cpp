#include "code_handles.h"

#include <map>
#include <mutex>
#include <string>
#include <unordered_set>

namespace simdev {

namespace {

struct FunctionHandle {
  const Function* function;
};

struct KernelHandle {
  const Function* function;
  std::map<Context*, FunctionHandle*> per_context;  // cuKernelGetFunction
};

struct ModuleHandle {
  std::map<std::string, FunctionHandle*> functions;
};

struct LibraryHandle {
  std::map<std::string, KernelHandle*> kernels;
};

struct Handles {
  std::mutex mu;
  std::unordered_set<const ModuleHandle*> modules;
  std::unordered_set<const LibraryHandle*> libraries;
  std::unordered_set<const FunctionHandle*> functions;
  std::unordered_set<const KernelHandle*> kernels;
};

Handles& handles() {
  static Handles* h = new Handles;  // never destroyed: workers may launch until exit
  return *h;
}

FunctionHandle* new_function_handle(Handles& h, const Function* f) {
  auto* fh = new FunctionHandle{f};
  h.functions.insert(fh);
  return fh;
}

void drop_function_handle(Handles& h, FunctionHandle* fh) {
  h.functions.erase(fh);
  delete fh;
}

}  // namespace

CUresult load_module(CUmodule* out) {
  Handles& h = handles();
  auto* m = new ModuleHandle;
  std::lock_guard lock(h.mu);
  h.modules.insert(m);
  *out = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult unload_module(CUmodule mod) {
  Handles& h = handles();
  auto* m = reinterpret_cast<ModuleHandle*>(mod);
  std::lock_guard lock(h.mu);
  if (!h.modules.erase(m)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& [name, fh] : m->functions) drop_function_handle(h, fh);
  delete m;
  return CUDA_SUCCESS;
}

CUresult module_function(CUmodule mod, const char* name, CUfunction* out) {
  Handles& h = handles();
  auto* m = reinterpret_cast<ModuleHandle*>(mod);
  std::lock_guard lock(h.mu);
  if (!h.modules.count(m)) return CUDA_ERROR_INVALID_HANDLE;
  const Function* f = find_function(name);
  if (!f) return CUDA_ERROR_NOT_FOUND;
  FunctionHandle*& fh = m->functions[name];
  if (!fh) fh = new_function_handle(h, f);
  *out = reinterpret_cast<CUfunction>(fh);
  return CUDA_SUCCESS;
}

CUresult load_library(CUlibrary* out) {
  Handles& h = handles();
  auto* lib = new LibraryHandle;
  std::lock_guard lock(h.mu);
  h.libraries.insert(lib);
  *out = reinterpret_cast<CUlibrary>(lib);
  return CUDA_SUCCESS;
}

CUresult unload_library(CUlibrary library) {
  Handles& h = handles();
  auto* lib = reinterpret_cast<LibraryHandle*>(library);
  std::lock_guard lock(h.mu);
  if (!h.libraries.erase(lib)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& [name, kh] : lib->kernels) {
    for (auto& [ctx, fh] : kh->per_context) drop_function_handle(h, fh);
    h.kernels.erase(kh);
    delete kh;
  }
  delete lib;
  return CUDA_SUCCESS;
}

CUresult library_kernel(CUlibrary library, const char* name, CUkernel* out) {
  Handles& h = handles();
  auto* lib = reinterpret_cast<LibraryHandle*>(library);
  std::lock_guard lock(h.mu);
  if (!h.libraries.count(lib)) return CUDA_ERROR_INVALID_HANDLE;
  const Function* f = find_function(name);
  if (!f) return CUDA_ERROR_NOT_FOUND;
  KernelHandle*& kh = lib->kernels[name];
  if (!kh) {
    kh = new KernelHandle{f, {}};
    h.kernels.insert(kh);
  }
  *out = reinterpret_cast<CUkernel>(kh);
  return CUDA_SUCCESS;
}

CUresult kernel_function(CUkernel k, Context* ctx, CUfunction* out) {
  Handles& h = handles();
  auto* kh = reinterpret_cast<KernelHandle*>(k);
  std::lock_guard lock(h.mu);
  if (!h.kernels.count(kh)) return CUDA_ERROR_INVALID_HANDLE;
  FunctionHandle*& fh = kh->per_context[ctx];
  if (!fh) fh = new_function_handle(h, kh->function);
  *out = reinterpret_cast<CUfunction>(fh);
  return CUDA_SUCCESS;
}

const Function* function_of(CUfunction f) {
  Handles& h = handles();
  auto* fh = reinterpret_cast<const FunctionHandle*>(f);
  std::lock_guard lock(h.mu);
  return h.functions.count(fh) ? fh->function : nullptr;
}

const Function* function_of_kernel(CUkernel k) {
  Handles& h = handles();
  auto* kh = reinterpret_cast<const KernelHandle*>(k);
  std::lock_guard lock(h.mu);
  return h.kernels.count(kh) ? kh->function : nullptr;
}

const Function* launchable_function(CUfunction f) {
  if (const Function* fn = function_of(f)) return fn;
  return function_of_kernel(reinterpret_cast<CUkernel>(f));
}

}  // namespace simdev
