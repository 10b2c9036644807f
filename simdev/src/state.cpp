#include "state.h"

#include <sys/resource.h>

#include <cstdio>
#include <vector>

#include "phys_pool.h"

namespace simdev {

namespace {

thread_local ContextStack tl_context_stack;  // zero-initialised, never destroyed

// Runs when the library loads: read the environment once. Problems are kept
// and reported by cuInit, so a bad variable is an error, not a crash.
__attribute__((constructor)) void load_configuration() {
  State& s = state();
  s.config = load_config_from_env();
  s.config_error = s.config.error;
  if (s.config_error.empty() && !s.config.fail_spec.empty())
    s.config_error = arm_faults_from_spec(s.config.fail_spec);
  s.h2d.set_bandwidth(s.config.h2d_bytes_per_ns);
  s.d2h.set_bandwidth(s.config.d2h_bytes_per_ns);
  phys_pool().set_limit(s.config.resident_bytes);
}

}  // namespace

State& state() {
  static State* s = new State;
  return *s;
}

CUresult check_initialized() {
  return state().initialized.load(std::memory_order_acquire) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

ContextStack& context_stack() { return tl_context_stack; }

CUresult current_context(Context** out) {
  if (tl_context_stack.empty() || !tl_context_stack.back()) return CUDA_ERROR_INVALID_CONTEXT;
  if (int e = state().sticky.load(std::memory_order_relaxed)) return static_cast<CUresult>(e);
  *out = tl_context_stack.back();
  return CUDA_SUCCESS;
}

void raise_sticky_error(CUresult e) {
  int expected = CUDA_SUCCESS;
  state().sticky.compare_exchange_strong(expected, e);
}

bool valid_context(CUcontext c) {
  State& s = state();
  std::lock_guard lock(s.ctx_mu);
  return s.contexts.count(reinterpret_cast<Context*>(c)) != 0;
}

unsigned memalloc_access_mask_locked(const Context* owner) {
  unsigned mask = 1u << owner->device;
  for (Context* c : state().contexts)
    if (c->peers.count(const_cast<Context*>(owner))) mask |= 1u << c->device;
  return mask;
}

CUresult device_attribute(CUdevice_attribute attr, int* value, CUdevice dev) {
  const Config& cfg = state().config;
  if (auto it = cfg.attributes.find(attr); it != cfg.attributes.end()) {
    if (it->second.error) return static_cast<CUresult>(it->second.error);
    *value = it->second.value;
    return CUDA_SUCCESS;
  }
  if (attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *value = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *value = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *value = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *value = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *value = 49152; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *value = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: *value = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *value = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *value = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: *value = 512; break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *value = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *value = 6144; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *value = 50 << 20; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *value = 2048; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *value = 2; break;  // one per direction
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *value = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *value = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *value = 32; break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: *value = cfg.host_numa_ids[dev]; break;
    // Distinct per device, as on a multi-GPU board (values are illustrative).
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0x19 + 0x10 * dev; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: *value = dev; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = cfg.host_vmm; break;
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = cfg.host_vmm; break;
    default: *value = 0; break;
  }
  return CUDA_SUCCESS;
}

}  // namespace simdev
