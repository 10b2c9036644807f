// NCCL's host API. NCCL's kernels reach a collective's buffers through a
// work queue in memory, not through their parameters, so no launch hook
// sees them; the host calls name every buffer and its stream. Each hook is
// the engine's nccl_call use case around NCCL's own function, found after
// libtierrt.so in the lookup order (direct symbols) or where the
// application's dlsym found it (a handle from dlopen).
#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "driver/driver.h"
#include "hooks.h"
#include "nccl_abi.h"
#include "runtime/engine.h"

using namespace tierrt;
using namespace tierrt::preload;

#define TIERRT_NCCL_HOOKS(X)                                                                   \
  X(ncclAllReduce) X(ncclBroadcast) X(ncclReduce) X(ncclAllGather) X(ncclReduceScatter)        \
  X(ncclBcast) X(ncclAlltoAll) X(ncclGather) X(ncclScatter)                                    \
  X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd) X(ncclCommRegister)                \
  X(ncclCommDeregister)

namespace {

enum class NcclFn : unsigned {
#define TIERRT_NCCL_ID_(name) name,
  TIERRT_NCCL_HOOKS(TIERRT_NCCL_ID_)
#undef TIERRT_NCCL_ID_
  kCount
};
constexpr unsigned kNcclCount = static_cast<unsigned>(NcclFn::kCount);

constexpr const char* kNcclNames[kNcclCount] = {
#define TIERRT_NCCL_NAME_(name) #name,
    TIERRT_NCCL_HOOKS(TIERRT_NCCL_NAME_)
#undef TIERRT_NCCL_NAME_
};

std::atomic<void*> g_nccl_real[kNcclCount];
// The library the application's dlsym found NCCL in (its handle), for the
// functions tierrt looks up without wrapping.
std::atomic<void*> g_nccl_library{nullptr};

// NCCL's own function: where the application's dlsym found it, else the
// next definition after ours.
template <NcclFn F, class Fn>
Fn real_nccl() noexcept {
  std::atomic<void*>& slot = g_nccl_real[static_cast<unsigned>(F)];
  void* fn = slot.load(std::memory_order_acquire);
  if (!fn) {
    fn = drv::real_dlsym()(RTLD_NEXT, kNcclNames[static_cast<unsigned>(F)]);
    slot.store(fn, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(fn);
}

#define TIERRT_NCCL_REAL(name) real_nccl<NcclFn::name, decltype(&::name)>()

std::size_t element_bytes(ncclDataType_t t) noexcept {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;  // NCCL refuses the call
  }
}

// Ranks in `comm`; 1 when NCCL cannot say (the call then fails in NCCL).
std::size_t ranks(ncclComm_t comm) noexcept {
  static std::atomic<void*> g_count{nullptr};
  void* fn = g_count.load(std::memory_order_acquire);
  if (!fn) {
    void* library = g_nccl_library.load(std::memory_order_acquire);
    fn = drv::real_dlsym()(library ? library : RTLD_NEXT, "ncclCommCount");
    g_count.store(fn, std::memory_order_release);
  }
  auto count = reinterpret_cast<decltype(&::ncclCommCount)>(fn);
  int n = 0;
  return count && count(comm, &n) == ncclSuccess && n > 0 ? static_cast<std::size_t>(n) : 1;
}

CUdeviceptr dev(const void* p) noexcept { return reinterpret_cast<CUdeviceptr>(p); }

bool went_out(ncclResult_t r) noexcept { return r == ncclSuccess || r == ncclInProgress; }

// A call touching `send_bytes` at `send` and `recv_bytes` at `recv`.
template <class Call>
ncclResult_t buffers(const void* send, std::size_t send_bytes, const void* recv, std::size_t recv_bytes,
                     CUstream stream, Call&& call) noexcept {
  // A communicator's buffers are on its device: that device's engine.
  Engine* e = Engine::sole();
  if (!e && Engine::count() > 1 && !(e = Engine::owning(dev(send)))) e = Engine::owning(dev(recv));
  if (!e) return call();
  const StridedRange ranges[2] = {contiguous(dev(send), send_bytes), contiguous(dev(recv), recv_bytes)};
  ncclResult_t r = ncclSuccess;
  const CUresult ready = e->nccl_call(2, [&](std::size_t i) { return ranges[i]; }, stream, [&] {
    r = call();
    return went_out(r);
  });
  return ready == CUDA_SUCCESS ? r : ncclUnhandledCudaError;
}

}  // namespace

namespace tierrt::preload {

void* nccl_hook_for(const char* name, void* found) noexcept {
  for (unsigned i = 0; i < kNcclCount; ++i) {
    if (std::strcmp(kNcclNames[i], name) != 0) continue;
    g_nccl_real[i].store(found, std::memory_order_release);
    Dl_info info;
    if (!g_nccl_library.load(std::memory_order_acquire) && dladdr(found, &info) && info.dli_fname)
      if (void* h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD)) g_nccl_library.store(h, std::memory_order_release);
#define TIERRT_NCCL_OURS_(fn) \
  if (static_cast<NcclFn>(i) == NcclFn::fn) return reinterpret_cast<void*>(&::fn);
    TIERRT_NCCL_HOOKS(TIERRT_NCCL_OURS_)
#undef TIERRT_NCCL_OURS_
  }
  return found;
}

}  // namespace tierrt::preload

extern "C" {

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, CUstream s) {
  auto real = TIERRT_NCCL_REAL(ncclAllReduce);
  if (!real) return ncclSystemError;
  const std::size_t bytes = count * element_bytes(t);
  return buffers(send, bytes, recv, bytes, s,
                 [&] { return real(send, recv, count, t, op, comm, s); });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           CUstream s) {
  auto real = TIERRT_NCCL_REAL(ncclBroadcast);
  if (!real) return ncclSystemError;
  const std::size_t bytes = count * element_bytes(t);
  return buffers(send, bytes, recv, bytes, s,
                 [&] { return real(send, recv, count, t, root, comm, s); });
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t comm, CUstream s) {
  auto real = TIERRT_NCCL_REAL(ncclReduce);
  if (!real) return ncclSystemError;
  const std::size_t bytes = count * element_bytes(t);
  return buffers(send, bytes, recv, bytes, s,
                 [&] { return real(send, recv, count, t, op, root, comm, s); });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t t, ncclComm_t comm,
                           CUstream s) {
  auto real = TIERRT_NCCL_REAL(ncclAllGather);
  if (!real) return ncclSystemError;
  const std::size_t bytes = send_count * element_bytes(t);
  return buffers(send, bytes, recv, bytes * ranks(comm), s,
                 [&] { return real(send, recv, send_count, t, comm, s); });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, CUstream s) {
  auto real = TIERRT_NCCL_REAL(ncclReduceScatter);
  if (!real) return ncclSystemError;
  const std::size_t bytes = recv_count * element_bytes(t);
  return buffers(send, bytes * ranks(comm), recv, bytes, s,
                 [&] { return real(send, recv, recv_count, t, op, comm, s); });
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t t, int root, ncclComm_t comm, CUstream s) {
  auto real = TIERRT_NCCL_REAL(ncclBcast);
  if (!real) return ncclSystemError;
  return buffers(buff, count * element_bytes(t), nullptr, 0, s, [&] { return real(buff, count, t, root, comm, s); });
}

ncclResult_t ncclAlltoAll(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                          CUstream s) {
  auto real = TIERRT_NCCL_REAL(ncclAlltoAll);
  if (!real) return ncclSystemError;
  const std::size_t bytes = count * element_bytes(t) * ranks(comm);
  return buffers(send, bytes, recv, bytes, s, [&] { return real(send, recv, count, t, comm, s); });
}

ncclResult_t ncclGather(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                        CUstream s) {
  auto real = TIERRT_NCCL_REAL(ncclGather);
  if (!real) return ncclSystemError;
  const std::size_t bytes = count * element_bytes(t);
  return buffers(send, bytes, recv, bytes * ranks(comm), s, [&] { return real(send, recv, count, t, root, comm, s); });
}

ncclResult_t ncclScatter(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                         CUstream s) {
  auto real = TIERRT_NCCL_REAL(ncclScatter);
  if (!real) return ncclSystemError;
  const std::size_t bytes = count * element_bytes(t);
  return buffers(send, bytes * ranks(comm), recv, bytes, s, [&] { return real(send, recv, count, t, root, comm, s); });
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, CUstream s) {
  auto real = TIERRT_NCCL_REAL(ncclSend);
  if (!real) return ncclSystemError;
  return buffers(send, count * element_bytes(t), nullptr, 0, s,
                 [&] { return real(send, count, t, peer, comm, s); });
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, CUstream s) {
  auto real = TIERRT_NCCL_REAL(ncclRecv);
  if (!real) return ncclSystemError;
  return buffers(nullptr, 0, recv, count * element_bytes(t), s,
                 [&] { return real(recv, count, t, peer, comm, s); });
}

ncclResult_t ncclGroupStart() {
  auto real = TIERRT_NCCL_REAL(ncclGroupStart);
  if (!real) return ncclSystemError;
  const ncclResult_t r = real();
  if (r == ncclSuccess) Engine::nccl_group_start();
  return r;
}

ncclResult_t ncclGroupEnd() {
  auto real = TIERRT_NCCL_REAL(ncclGroupEnd);
  if (!real) return ncclSystemError;
  const ncclResult_t r = real();
  Engine::nccl_group_end(went_out(r));
  return r;
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  auto real = TIERRT_NCCL_REAL(ncclCommRegister);
  if (!real) return ncclSystemError;
  const ncclResult_t r = real(comm, buff, size, handle);
  if (r == ncclSuccess && handle)
    if (Engine* e = Engine::owning(dev(buff))) e->nccl_register(dev(buff), size, *handle);
  return r;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  auto real = TIERRT_NCCL_REAL(ncclCommDeregister);
  if (!real) return ncclSystemError;
  for (int i = 0, n = Engine::count(); i < n; ++i) Engine::at(i)->nccl_deregister(handle);
  return real(comm, handle);
}

}  // extern "C"
