// The driver entry points libtierrt.so wraps, each exported under the exact
// name NVIDIA's driver uses, and the real function each one forwards to.
//
// X(exported name, cuda.h name whose prototype it has). The real address is
// resolved once from libcuda.so.1 itself (never through the global scope,
// where our own definitions would be found first).
#pragma once

#include <cuda.h>

#include <atomic>

// Everything that spells cuGetProcAddress the cuda.h way (as the _v2 form)
// is seen first; then the name means the original 4-argument function, which
// the driver exports too and which we wrap separately.
#include "driver/driver.h"
#undef cuGetProcAddress
extern "C" CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);
// Likewise cuStreamBeginCapture: the name alone is CUDA 10.0's form, which
// takes no mode (a global-mode capture); the driver still exports it.
#undef cuStreamBeginCapture
extern "C" CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream);
// And the graph entry points of CUDA 11, which cuda.h now spells as their
// newer forms; programs built then still reach them (cuGetProcAddress with
// an older version, or the names themselves).
#undef cuGraphInstantiate
#undef cuGraphExecUpdate
#undef cuGraphAddKernelNode
#undef cuGraphKernelNodeSetParams
#undef cuGraphExecKernelNodeSetParams
extern "C" {
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t log_size);
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                                       size_t log_size);
CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphNode* error_node,
                                   CUgraphExecUpdateResult* result);
CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                                      const CUDA_KERNEL_NODE_PARAMS_v1* params);
CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* params);
CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                const CUDA_KERNEL_NODE_PARAMS_v1* params);
}
// The same for the first forms of the batch copies (CUDA 12.8, with a
// failure index) and of the stream memory operations (CUDA 8.0 and 9.0,
// with the _v2 forms' prototypes), which drivers still export.
#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamBatchMemOp
extern "C" CUresult CUDAAPI cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                               CUmemcpyAttributes* attrs, size_t* attr_idxs, size_t num_attrs,
                                               size_t* fail_idx, CUstream stream);
extern "C" CUresult CUDAAPI cuMemcpy3DBatchAsync(size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail_idx,
                                                 unsigned long long flags, CUstream stream);

#define TIERRT_HOOKS(X)                                                              \
  X(cuMemAlloc_v2, cuMemAlloc_v2)                                                    \
  X(cuMemAllocPitch_v2, cuMemAllocPitch_v2)                                          \
  X(cuMemFree_v2, cuMemFree_v2)                                                      \
  X(cuMemAllocAsync, cuMemAllocAsync)                                                \
  X(cuMemAllocAsync_ptsz, cuMemAllocAsync)                                           \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync)                                \
  X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync)                           \
  X(cuMemFreeAsync, cuMemFreeAsync)                                                  \
  X(cuMemFreeAsync_ptsz, cuMemFreeAsync)                                             \
  X(cuMemGetInfo_v2, cuMemGetInfo_v2)                                                \
  X(cuPointerGetAttribute, cuPointerGetAttribute)                                    \
  X(cuPointerGetAttributes, cuPointerGetAttributes)                                  \
  X(cuLaunchKernel, cuLaunchKernel)                                                  \
  X(cuLaunchKernel_ptsz, cuLaunchKernel)                                             \
  X(cuLaunchKernelEx, cuLaunchKernelEx)                                              \
  X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx)                                         \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel)                            \
  X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel)                       \
  X(cuGraphLaunch, cuGraphLaunch)                                                    \
  X(cuGraphLaunch_ptsz, cuGraphLaunch)                                               \
  X(cuMemcpy, cuMemcpy)                                                              \
  X(cuMemcpy_ptds, cuMemcpy)                                                         \
  X(cuMemcpyAsync, cuMemcpyAsync)                                                    \
  X(cuMemcpyAsync_ptsz, cuMemcpyAsync)                                               \
  X(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2)                                                \
  X(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2)                                           \
  X(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2)                                                \
  X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2)                                           \
  X(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2)                                                \
  X(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2)                                           \
  X(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2)                                      \
  X(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2)                                 \
  X(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2)                                      \
  X(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2)                                 \
  X(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2)                                      \
  X(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2)                                 \
  X(cuMemsetD8_v2, cuMemsetD8_v2)                                                    \
  X(cuMemsetD8_v2_ptds, cuMemsetD8_v2)                                               \
  X(cuMemsetD16_v2, cuMemsetD16_v2)                                                  \
  X(cuMemsetD16_v2_ptds, cuMemsetD16_v2)                                             \
  X(cuMemsetD32_v2, cuMemsetD32_v2)                                                  \
  X(cuMemsetD32_v2_ptds, cuMemsetD32_v2)                                             \
  X(cuMemsetD8Async, cuMemsetD8Async)                                                \
  X(cuMemsetD8Async_ptsz, cuMemsetD8Async)                                           \
  X(cuMemsetD16Async, cuMemsetD16Async)                                              \
  X(cuMemsetD16Async_ptsz, cuMemsetD16Async)                                         \
  X(cuMemsetD32Async, cuMemsetD32Async)                                              \
  X(cuMemsetD32Async_ptsz, cuMemsetD32Async)                                         \
  X(cuStreamBeginCapture_v2, cuStreamBeginCapture_v2)                                \
  X(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2)                           \
  X(cuStreamEndCapture, cuStreamEndCapture)                                          \
  X(cuStreamEndCapture_ptsz, cuStreamEndCapture)                                     \
  X(cuCtxSynchronize, cuCtxSynchronize)                                              \
  X(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess)                                    \
  X(cuStreamDestroy_v2, cuStreamDestroy_v2)                                          \
  X(cuStreamSynchronize, cuStreamSynchronize)                                        \
  X(cuStreamSynchronize_ptsz, cuStreamSynchronize)                                   \
  X(cuGetProcAddress, cuGetProcAddress)                                              \
  X(cuGetProcAddress_v2, cuGetProcAddress_v2)                                        \
  X(cuModuleGetFunction, cuModuleGetFunction)                                        \
  X(cuLibraryGetKernel, cuLibraryGetKernel)                                          \
  X(cuKernelGetFunction, cuKernelGetFunction)                                        \
  X(cuModuleUnload, cuModuleUnload)                                                  \
  X(cuLibraryUnload, cuLibraryUnload)                                                \
  X(cuStreamBeginCapture, cuStreamBeginCapture)                                      \
  X(cuStreamBeginCapture_ptsz, cuStreamBeginCapture)                                 \
  X(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph)                        \
  X(cuStreamBeginCaptureToGraph_ptsz, cuStreamBeginCaptureToGraph)                   \
  X(cuEventRecord, cuEventRecord)                                                    \
  X(cuEventRecord_ptsz, cuEventRecord)                                               \
  X(cuEventRecordWithFlags, cuEventRecordWithFlags)                                  \
  X(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags)                             \
  X(cuStreamWaitEvent, cuStreamWaitEvent)                                            \
  X(cuStreamWaitEvent_ptsz, cuStreamWaitEvent)                                       \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags)                        \
  X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams)                      \
  X(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams)                 \
  X(cuGraphExecUpdate_v2, cuGraphExecUpdate_v2)                                      \
  X(cuGraphAddKernelNode_v2, cuGraphAddKernelNode_v2)                                \
  X(cuGraphKernelNodeSetParams_v2, cuGraphKernelNodeSetParams_v2)                    \
  X(cuGraphExecKernelNodeSetParams_v2, cuGraphExecKernelNodeSetParams_v2)            \
  X(cuGraphAddMemcpyNode, cuGraphAddMemcpyNode)                                      \
  X(cuGraphAddMemsetNode, cuGraphAddMemsetNode)                                      \
  X(cuGraphDestroy, cuGraphDestroy)                                                  \
  X(cuGraphExecDestroy, cuGraphExecDestroy)                                          \
  X(cuGraphInstantiate, cuGraphInstantiate)                                          \
  X(cuGraphInstantiate_v2, cuGraphInstantiate_v2)                                    \
  X(cuGraphExecUpdate, cuGraphExecUpdate)                                            \
  X(cuGraphAddKernelNode, cuGraphAddKernelNode)                                      \
  X(cuGraphKernelNodeSetParams, cuGraphKernelNodeSetParams)                          \
  X(cuGraphExecKernelNodeSetParams, cuGraphExecKernelNodeSetParams)            \
  X(cuMemGetAddressRange_v2, cuMemGetAddressRange_v2)                                \
  X(cuIpcGetMemHandle, cuIpcGetMemHandle)                                            \
  X(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle_v2)                                    \
  X(cuIpcCloseMemHandle, cuIpcCloseMemHandle)                                        \
  X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle)                        \
  X(cuMemcpy2D_v2, cuMemcpy2D_v2)                                                    \
  X(cuMemcpy2D_v2_ptds, cuMemcpy2D_v2)                                               \
  X(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2)                                  \
  X(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned_v2)                             \
  X(cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2)                                          \
  X(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync_v2)                                     \
  X(cuMemcpy3D_v2, cuMemcpy3D_v2)                                                    \
  X(cuMemcpy3D_v2_ptds, cuMemcpy3D_v2)                                               \
  X(cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2)                                          \
  X(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync_v2)                                     \
  X(cuMemcpyPeer, cuMemcpyPeer)                                                      \
  X(cuMemcpyPeer_ptds, cuMemcpyPeer)                                                 \
  X(cuMemcpyPeerAsync, cuMemcpyPeerAsync)                                            \
  X(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync)                                       \
  X(cuMemcpy3DPeer, cuMemcpy3DPeer)                                                  \
  X(cuMemcpy3DPeer_ptds, cuMemcpy3DPeer)                                             \
  X(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync)                                        \
  X(cuMemcpy3DPeerAsync_ptsz, cuMemcpy3DPeerAsync)                                   \
  X(cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync_v2)                                    \
  X(cuMemcpyBatchAsync_v2_ptsz, cuMemcpyBatchAsync_v2)                               \
  X(cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync_v2)                                \
  X(cuMemcpy3DBatchAsync_v2_ptsz, cuMemcpy3DBatchAsync_v2)                           \
  X(cuMemsetD2D8_v2, cuMemsetD2D8_v2)                                                \
  X(cuMemsetD2D8_v2_ptds, cuMemsetD2D8_v2)                                           \
  X(cuMemsetD2D16_v2, cuMemsetD2D16_v2)                                              \
  X(cuMemsetD2D16_v2_ptds, cuMemsetD2D16_v2)                                         \
  X(cuMemsetD2D32_v2, cuMemsetD2D32_v2)                                              \
  X(cuMemsetD2D32_v2_ptds, cuMemsetD2D32_v2)                                         \
  X(cuMemsetD2D8Async, cuMemsetD2D8Async)                                            \
  X(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async)                                       \
  X(cuMemsetD2D16Async, cuMemsetD2D16Async)                                          \
  X(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async)                                     \
  X(cuMemsetD2D32Async, cuMemsetD2D32Async)                                          \
  X(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async)                                     \
  X(cuStreamWriteValue32_v2, cuStreamWriteValue32_v2)                                \
  X(cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue32_v2)                           \
  X(cuStreamWriteValue64_v2, cuStreamWriteValue64_v2)                                \
  X(cuStreamWriteValue64_v2_ptsz, cuStreamWriteValue64_v2)                           \
  X(cuStreamWaitValue32_v2, cuStreamWaitValue32_v2)                                  \
  X(cuStreamWaitValue32_v2_ptsz, cuStreamWaitValue32_v2)                             \
  X(cuStreamWaitValue64_v2, cuStreamWaitValue64_v2)                                  \
  X(cuStreamWaitValue64_v2_ptsz, cuStreamWaitValue64_v2)                             \
  X(cuStreamBatchMemOp_v2, cuStreamBatchMemOp_v2)                                    \
  X(cuStreamBatchMemOp_v2_ptsz, cuStreamBatchMemOp_v2)                               \
  X(cuMemcpyBatchAsync, cuMemcpyBatchAsync)                                          \
  X(cuMemcpyBatchAsync_ptsz, cuMemcpyBatchAsync)                                     \
  X(cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync)                                      \
  X(cuMemcpy3DBatchAsync_ptsz, cuMemcpy3DBatchAsync)                                 \
  X(cuStreamWriteValue32, cuStreamWriteValue32_v2)                                   \
  X(cuStreamWriteValue32_ptsz, cuStreamWriteValue32_v2)                              \
  X(cuStreamWriteValue64, cuStreamWriteValue64_v2)                                   \
  X(cuStreamWriteValue64_ptsz, cuStreamWriteValue64_v2)                              \
  X(cuStreamWaitValue32, cuStreamWaitValue32_v2)                                     \
  X(cuStreamWaitValue32_ptsz, cuStreamWaitValue32_v2)                                \
  X(cuStreamWaitValue64, cuStreamWaitValue64_v2)                                     \
  X(cuStreamWaitValue64_ptsz, cuStreamWaitValue64_v2)                                \
  X(cuStreamBatchMemOp, cuStreamBatchMemOp_v2)                                       \
  X(cuStreamBatchMemOp_ptsz, cuStreamBatchMemOp_v2)

namespace tierrt::preload {

enum class Hook : unsigned {
#define TIERRT_HOOK_ID_(name, proto) name,
  TIERRT_HOOKS(TIERRT_HOOK_ID_)
#undef TIERRT_HOOK_ID_
  kCount
};

// The driver's own function for a hook; null when the loaded driver lacks it.
void* real_address(Hook h) noexcept;

template <Hook H, class Fn>
inline Fn real() noexcept {
  return reinterpret_cast<Fn>(real_address(H));
}

// The stream a call without a stream argument runs on.
inline CUstream legacy_default() noexcept { return CU_STREAM_LEGACY; }
inline CUstream per_thread_default() noexcept { return CU_STREAM_PER_THREAD; }
// The _ptsz forms read the NULL stream as the per-thread stream.
inline CUstream ptsz(CUstream s) noexcept { return s ? s : CU_STREAM_PER_THREAD; }

// Our function for a driver symbol name, or null when we don't wrap it.
void* hook_for_name(const char* name) noexcept;
// Our function standing in for the driver function at `real`, or `real`.
void* substitute_address(void* real) noexcept;
// Our function for NCCL's function `name`, found at `found` in libnccl
// (which it then forwards to), or `found` when we don't wrap it.
void* nccl_hook_for(const char* name, void* found) noexcept;

}  // namespace tierrt::preload

// The real function of hook `name`, typed like cuda.h's `proto`.
#define TIERRT_REAL(name, proto) \
  (::tierrt::preload::real<::tierrt::preload::Hook::name, decltype(&::proto)>())
