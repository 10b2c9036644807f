// A stand-in for libnccl.so.2 on simdev, for one rank: every collective of
// one rank is a copy from its send buffer to its receive buffer. Its kernel
// reaches the buffers as NCCL's do, only through a work item in a
// device-side queue written with cuMemcpyHtoD: the kernel's one parameter is
// the item's address, never a buffer's. Inside ncclGroupStart/End the work
// is enqueued at the outermost ncclGroupEnd, sends paired with receives.
#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "preload/nccl_abi.h"
#include "simdev/simdev.h"

namespace {

// One work item in the device-side queue.
struct Work {
  CUdeviceptr src = 0, dst = 0;
  std::uint64_t bytes = 0;
};

constexpr unsigned kQueueItems = 1024;

void work_kernel(const simdev_launch* l) {
  const auto* w = *static_cast<const Work* const*>(l->params[0]);
  std::memmove(reinterpret_cast<void*>(w->dst), reinterpret_cast<const void*>(w->src), w->bytes);
}

struct Op {
  enum Kind { Copy, Send, Recv } kind;
  ncclComm* comm;
  CUdeviceptr src, dst;
  std::uint64_t bytes;
  CUstream stream;
};

thread_local int t_group_depth = 0;
thread_local std::vector<Op> t_group_ops;

std::size_t element_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

}  // namespace

struct ncclComm {
  CUfunction kernel = nullptr;
  CUdeviceptr queue = 0;
  unsigned next = 0;
  std::mutex mu;
};

namespace {

ncclResult_t enqueue(ncclComm* comm, CUdeviceptr src, CUdeviceptr dst, std::uint64_t bytes, CUstream stream) {
  if (bytes == 0) return ncclSuccess;
  CUdeviceptr slot;
  {
    std::lock_guard lock(comm->mu);
    slot = comm->queue + (comm->next++ % kQueueItems) * sizeof(Work);
  }
  const Work w{src, dst, bytes};
  if (cuMemcpyHtoD_v2(slot, &w, sizeof w) != CUDA_SUCCESS) return ncclUnhandledCudaError;
  void* params[] = {&slot};
  if (cuLaunchKernel(comm->kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) != CUDA_SUCCESS)
    return ncclUnhandledCudaError;
  return ncclSuccess;
}

ncclResult_t submit(const Op& op) {
  if (t_group_depth > 0) {
    t_group_ops.push_back(op);
    return ncclSuccess;
  }
  if (op.kind != Op::Copy) return ncclInvalidUsage;  // one rank: a send needs its receive in the same group
  return enqueue(op.comm, op.src, op.dst, op.bytes, op.stream);
}

}  // namespace

extern "C" {

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId, int rank) {
  if (!out || nranks != 1 || rank != 0) return ncclInvalidArgument;
  static const size_t sizes[] = {sizeof(Work*)};
  simdev_kernel_desc d{"nccl_standin_work", &work_kernel, 1, sizes, nullptr, 0};
  if (simdev_try_register_kernel(&d) != 0) return ncclSystemError;
  auto* comm = new ncclComm;
  CUmodule m;
  if (cuModuleLoadData(&m, "simdev host kernels") != CUDA_SUCCESS ||
      cuModuleGetFunction(&comm->kernel, m, d.name) != CUDA_SUCCESS ||
      cuMemAlloc_v2(&comm->queue, kQueueItems * sizeof(Work)) != CUDA_SUCCESS) {
    delete comm;
    return ncclUnhandledCudaError;
  }
  *out = comm;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  const bool freed = cuCtxSynchronize() == CUDA_SUCCESS && cuMemFree_v2(comm->queue) == CUDA_SUCCESS;
  delete comm;
  return freed ? ncclSuccess : ncclUnhandledCudaError;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return ncclInvalidArgument;
  *count = 1;
  return ncclSuccess;
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (!comm || !buff || !size || !handle) return ncclInvalidArgument;
  *handle = buff;
  return ncclSuccess;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return comm && handle ? ncclSuccess : ncclInvalidArgument;
}

#define STANDIN_COPY_(send, recv, bytes, comm, stream)                                                       \
  submit(Op{Op::Copy, comm, reinterpret_cast<CUdeviceptr>(send), reinterpret_cast<CUdeviceptr>(recv), bytes, \
                  stream})

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t,
                           ncclComm_t comm, CUstream s) {
  return STANDIN_COPY_(send, recv, count * element_bytes(t), comm, s);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int, ncclComm_t comm,
                           CUstream s) {
  return STANDIN_COPY_(send, recv, count * element_bytes(t), comm, s);
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t, int,
                        ncclComm_t comm, CUstream s) {
  return STANDIN_COPY_(send, recv, count * element_bytes(t), comm, s);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                           CUstream s) {
  return STANDIN_COPY_(send, recv, count * element_bytes(t), comm, s);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t,
                               ncclComm_t comm, CUstream s) {
  return STANDIN_COPY_(send, recv, count * element_bytes(t), comm, s);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t t, int, ncclComm_t comm, CUstream s) {
  return STANDIN_COPY_(buff, buff, count * element_bytes(t), comm, s);
}

ncclResult_t ncclAlltoAll(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t comm, CUstream s) {
  return STANDIN_COPY_(send, recv, count * element_bytes(t), comm, s);
}

ncclResult_t ncclGather(const void* send, void* recv, size_t count, ncclDataType_t t, int, ncclComm_t comm,
                        CUstream s) {
  return STANDIN_COPY_(send, recv, count * element_bytes(t), comm, s);
}

ncclResult_t ncclScatter(const void* send, void* recv, size_t count, ncclDataType_t t, int, ncclComm_t comm,
                         CUstream s) {
  return STANDIN_COPY_(send, recv, count * element_bytes(t), comm, s);
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, CUstream s) {
  if (peer != 0) return ncclInvalidArgument;
  return submit(Op{Op::Send, comm, reinterpret_cast<CUdeviceptr>(send), 0, count * element_bytes(t), s});
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, CUstream s) {
  if (peer != 0) return ncclInvalidArgument;
  return submit(Op{Op::Recv, comm, 0, reinterpret_cast<CUdeviceptr>(recv), count * element_bytes(t), s});
}

ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return ncclInvalidUsage;
  if (--t_group_depth > 0) return ncclSuccess;
  std::vector<Op> ops;
  ops.swap(t_group_ops);
  std::vector<Op> sends, recvs;
  for (const Op& op : ops) {
    if (op.kind == Op::Copy) {
      if (ncclResult_t r = enqueue(op.comm, op.src, op.dst, op.bytes, op.stream)) return r;
    } else {
      (op.kind == Op::Send ? sends : recvs).push_back(op);
    }
  }
  if (sends.size() != recvs.size()) return ncclInvalidUsage;
  for (std::size_t i = 0; i < sends.size(); ++i) {
    if (sends[i].bytes != recvs[i].bytes) return ncclInvalidUsage;
    if (ncclResult_t r = enqueue(recvs[i].comm, sends[i].src, recvs[i].dst, recvs[i].bytes, recvs[i].stream)) return r;
  }
  return ncclSuccess;
}

}  // extern "C"
