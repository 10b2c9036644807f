// cuGetProcAddress: the entry point of a driver symbol for a requested CUDA
// version and default-stream flavour, as libcudart and PyTorch look them up.
#include <cstring>
#include <string>
#include <unordered_map>

#include "proc_table.h"
#include "state.h"

namespace simdev {

namespace {

// Symbol -> the CUDA version of its oldest ABI form (0: no typedef, so as
// old as the driver API itself).
const std::unordered_map<std::string, int>& introduced_in() {
  static const auto* table = [] {
    auto* t = new std::unordered_map<std::string, int>;
    for (unsigned i = 0; i < driver_proc_table_size; ++i) {
      const simdev_proc_entry& e = driver_proc_table[i];
      auto [it, inserted] = t->emplace(e.symbol, e.version);
      if (!inserted && e.version < it->second) it->second = e.version;
    }
    return t;
  }();
  return *table;
}

}  // namespace

int driver_version() { return state().config.driver_version; }

bool newer_than_driver(const char* symbol) {
  auto it = introduced_in().find(symbol);
  return it != introduced_in().end() && it->second > driver_version();
}

bool is_implemented_name(const std::string& exported) {
  for (unsigned i = 0; i < driver_proc_table_size; ++i) {
    const simdev_proc_entry& e = driver_proc_table[i];
    if (exported == e.exported) return e.fn != e.stub;
  }
  return false;
}

}  // namespace simdev

using namespace simdev;

namespace {

CUresult lookup(const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  constexpr cuuint64_t kKnown = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (flags & ~kKnown) return CUDA_ERROR_INVALID_VALUE;
  if (version > driver_version()) return CUDA_ERROR_INVALID_VALUE;  // newer than this driver
  if (newer_than_driver(symbol)) {
    // An older driver does not have the symbol at all.
    *pfn = nullptr;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const simdev_proc_entry* best_plain = nullptr;
  const simdev_proc_entry* best_per_thread = nullptr;
  bool known = false;
  for (unsigned i = 0; i < driver_proc_table_size; ++i) {
    const simdev_proc_entry& e = driver_proc_table[i];
    if (std::strcmp(e.symbol, symbol) != 0) continue;
    known = true;
    if (e.version > version) continue;
    const simdev_proc_entry*& best = e.per_thread ? best_per_thread : best_plain;
    if (!best || e.version > best->version) best = &e;
  }
  // The per-thread form where one exists, else the only form there is.
  const simdev_proc_entry* pick = per_thread && best_per_thread ? best_per_thread : best_plain;
  *pfn = nullptr;
  if (!pick) {
    // Documented: success with a null pointer, the reason in the status.
    if (status) *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
  }
  *pfn = pick->fn;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

SIMDEV_API CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                                CUdriverProcAddressQueryResult* status) {
  // Lookups work before cuInit: libcudart resolves cuInit itself this way.
  SIMDEV_FAULT_POINT("cuGetProcAddress_v2", CUDA_ERROR_NOT_FOUND);
  return lookup(symbol, pfn, version, flags, status);
}

SIMDEV_API CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}
