// Graphs built node by node, instantiated, updated and destroyed: each call
// is forwarded, and what succeeded tells the engine which blocks each graph
// names, so that cuGraphLaunch makes them resident (hooks_launch.cpp).
#include "hooks.h"
#include "engine_dispatch.h"
#include "runtime/engine.h"

using namespace tierrt;
using namespace tierrt::preload;

namespace {

// CUDA 11's kernel node parameters, as the engine reads them (the fields
// both forms share).
CUDA_KERNEL_NODE_PARAMS newer_form(const CUDA_KERNEL_NODE_PARAMS_v1& p) noexcept {
  CUDA_KERNEL_NODE_PARAMS q{};
  q.func = p.func;
  q.kernelParams = p.kernelParams;
  q.extra = p.extra;
  return q;
}

}  // namespace

extern "C" {

CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  auto forward = [&] { return TIERRT_REAL(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags)(exec, graph, flags); };
  return through_engines([&](Engine& e, auto& next) { return e.graph_instantiate(exec, graph, next); }, forward);
}

#define TIERRT_INSTANTIATE_PARAMS_(name)                                                      \
  CUresult name(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {    \
    auto forward = [&] { return TIERRT_REAL(name, cuGraphInstantiateWithParams)(exec, graph, params); }; \
    return through_engines([&](Engine& e, auto& next) { return e.graph_instantiate(exec, graph, next); }, forward);                                                                         \
  }
TIERRT_INSTANTIATE_PARAMS_(cuGraphInstantiateWithParams)
TIERRT_INSTANTIATE_PARAMS_(cuGraphInstantiateWithParams_ptsz)

CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  auto forward = [&] { return TIERRT_REAL(cuGraphExecUpdate_v2, cuGraphExecUpdate_v2)(exec, graph, info); };
  return through_engines([&](Engine& e, auto& next) { return e.graph_exec_update(exec, graph, next); }, forward);
}

CUresult cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                                 const CUDA_KERNEL_NODE_PARAMS* p) {
  auto forward = [&] { return TIERRT_REAL(cuGraphAddKernelNode_v2, cuGraphAddKernelNode_v2)(node, graph, deps, n, p); };
  return through_engines([&](Engine& e, auto& next) { return e.graph_add_kernel_node(node, graph, p, next); }, forward);
}

CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  auto forward = [&] { return TIERRT_REAL(cuGraphKernelNodeSetParams_v2, cuGraphKernelNodeSetParams_v2)(node, p); };
  return through_engines([&](Engine& e, auto& next) { return e.graph_set_kernel_node(node, p, next); }, forward);
}

CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  auto forward = [&] {
    return TIERRT_REAL(cuGraphExecKernelNodeSetParams_v2, cuGraphExecKernelNodeSetParams_v2)(exec, node, p);
  };
  return through_engines([&](Engine& e, auto& next) { return e.graph_exec_set_kernel_node(exec, node, p, next); }, forward);
}

CUresult cuGraphAddMemcpyNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                              const CUDA_MEMCPY3D* p, CUcontext ctx) {
  auto forward = [&] { return TIERRT_REAL(cuGraphAddMemcpyNode, cuGraphAddMemcpyNode)(node, graph, deps, n, p, ctx); };
  return through_engines([&](Engine& e, auto& next) { return e.graph_add_memcpy_node(node, graph, p, next); }, forward);
}

CUresult cuGraphAddMemsetNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                              const CUDA_MEMSET_NODE_PARAMS* p, CUcontext ctx) {
  auto forward = [&] { return TIERRT_REAL(cuGraphAddMemsetNode, cuGraphAddMemsetNode)(node, graph, deps, n, p, ctx); };
  return through_engines([&](Engine& e, auto& next) { return e.graph_add_memset_node(node, graph, p, next); }, forward);
}

CUresult cuGraphDestroy(CUgraph graph) {
  auto forward = [&] { return TIERRT_REAL(cuGraphDestroy, cuGraphDestroy)(graph); };
  return through_engines([&](Engine& e, auto& next) { return e.graph_destroy(graph, next); }, forward);
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  auto forward = [&] { return TIERRT_REAL(cuGraphExecDestroy, cuGraphExecDestroy)(exec); };
  return through_engines([&](Engine& e, auto& next) { return e.graph_exec_destroy(exec, next); }, forward);
}

// CUDA 11's forms: the same, for programs built then. The driver may lack
// them: a program that calls one anyway gets NOT_SUPPORTED.
#define TIERRT_INSTANTIATE_V1_(name)                                                                  \
  CUresult name(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t log_size) { \
    auto real = TIERRT_REAL(name, name);                                                              \
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;                                                       \
    auto forward = [&] { return real(exec, graph, error_node, log, log_size); };                      \
    return through_engines([&](Engine& e, auto& next) { return e.graph_instantiate(exec, graph, next); }, forward);                                                                                 \
  }
TIERRT_INSTANTIATE_V1_(cuGraphInstantiate)
TIERRT_INSTANTIATE_V1_(cuGraphInstantiate_v2)

CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphNode* error_node, CUgraphExecUpdateResult* result) {
  auto real = TIERRT_REAL(cuGraphExecUpdate, cuGraphExecUpdate);
  if (!real) return CUDA_ERROR_NOT_SUPPORTED;
  auto forward = [&] { return real(exec, graph, error_node, result); };
  return through_engines([&](Engine& e, auto& next) { return e.graph_exec_update(exec, graph, next); }, forward);
}

CUresult cuGraphAddKernelNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  auto real = TIERRT_REAL(cuGraphAddKernelNode, cuGraphAddKernelNode);
  if (!real) return CUDA_ERROR_NOT_SUPPORTED;
  auto forward = [&] { return real(node, graph, deps, n, p); };
  if (!p) return forward();
  const CUDA_KERNEL_NODE_PARAMS q = newer_form(*p);
  return through_engines([&](Engine& e, auto& next) { return e.graph_add_kernel_node(node, graph, &q, next); }, forward);
}

CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  auto real = TIERRT_REAL(cuGraphKernelNodeSetParams, cuGraphKernelNodeSetParams);
  if (!real) return CUDA_ERROR_NOT_SUPPORTED;
  auto forward = [&] { return real(node, p); };
  if (!p) return forward();
  const CUDA_KERNEL_NODE_PARAMS q = newer_form(*p);
  return through_engines([&](Engine& e, auto& next) { return e.graph_set_kernel_node(node, &q, next); }, forward);
}

CUresult cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  auto real = TIERRT_REAL(cuGraphExecKernelNodeSetParams, cuGraphExecKernelNodeSetParams);
  if (!real) return CUDA_ERROR_NOT_SUPPORTED;
  auto forward = [&] { return real(exec, node, p); };
  if (!p) return forward();
  const CUDA_KERNEL_NODE_PARAMS q = newer_form(*p);
  return through_engines([&](Engine& e, auto& next) { return e.graph_exec_set_kernel_node(exec, node, &q, next); }, forward);
}

}  // extern "C"
