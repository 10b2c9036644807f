#include "contract.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include "kernels_ptx.h"

void PrintTo(CUresult r, std::ostream* os) {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) name = "unknown CUresult";
  *os << name << " (" << static_cast<int>(r) << ")";
}

namespace contract {

const char* kernels_image() { return kContractKernelsPtx; }

namespace {

CUresult create_session(Session* s) {
  CUresult r = cuInit(0);
  if (r != CUDA_SUCCESS) return r;
  if ((r = cuDeviceGet(&s->device, 0)) != CUDA_SUCCESS) return r;
  if ((r = cuDevicePrimaryCtxRetain(&s->context, s->device)) != CUDA_SUCCESS) return r;
  if ((r = cuCtxSetCurrent(s->context)) != CUDA_SUCCESS) return r;
  register_contract_host_kernels();
  Kernels& k = s->kernels;
  if ((r = cuModuleLoadData(&k.module, kernels_image())) != CUDA_SUCCESS) return r;
  const std::pair<CUfunction*, const char*> fns[] = {
      {&k.fill_u32, kFillU32},
      {&k.add_one_u32, kAddOneU32},
      {&k.add_one_u32x8, kAddOneU32x8},
      {&k.copy_bytes, kCopyBytes},
      {&k.sum_u32, kSumU32},
      {&k.fill_table_u32, kFillTableU32},
      {&k.wait_then_fill_u32, kWaitThenFillU32},
  };
  for (const auto& [fn, name] : fns)
    if ((r = cuModuleGetFunction(fn, k.module, name)) != CUDA_SUCCESS) return r;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult session(const Session** out) {
  static Session s;
  static CUresult result = CUDA_ERROR_NOT_INITIALIZED;
  static std::once_flag once;
  std::call_once(once, [] { result = create_session(&s); });
  if (result == CUDA_SUCCESS) *out = &s;
  return result;
}

CUresult fill_u32(const Kernels& k, CUstream s, CUdeviceptr p, uint32_t value, uint64_t n) {
  return launch(k.fill_u32, s, n, p, value, n);
}
CUresult add_one_u32(const Kernels& k, CUstream s, CUdeviceptr p, uint64_t n) {
  return launch(k.add_one_u32, s, n, p, n);
}
CUresult add_one_u32x8(const Kernels& k, CUstream s, const CUdeviceptr (&p)[8]) {
  return launch(k.add_one_u32x8, s, kAddOneX8Words, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
}
CUresult copy_bytes(const Kernels& k, CUstream s, CUdeviceptr dst, CUdeviceptr src, uint64_t n) {
  return launch(k.copy_bytes, s, n, dst, src, n);
}
CUresult sum_u32(const Kernels& k, CUstream s, CUdeviceptr p, uint64_t n, CUdeviceptr acc) {
  return launch(k.sum_u32, s, n, p, n, acc);
}

void CUDA_CB Gate::run(void* self) {
  auto* g = static_cast<Gate*>(self);
  g->entered_.store(true);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!g->open_.load()) {
    if (std::chrono::steady_clock::now() > deadline) {
      g->timed_out_.store(true);
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

CUresult wait_idle(CUstream s, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  CUresult r = cuStreamQuery(s);
  while (r == CUDA_ERROR_NOT_READY && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    r = cuStreamQuery(s);
  }
  return r;
}

int child_fail(int code, const char* what, CUresult got, CUresult want) {
  const char* g = nullptr;
  const char* w = nullptr;
  cuGetErrorName(got, &g);
  cuGetErrorName(want, &w);
  std::fprintf(stderr, "%s: got %s (%d), want %s (%d)\n", what, g ? g : "?", static_cast<int>(got),
               w ? w : "?", static_cast<int>(want));
  return code;
}

}  // namespace contract

void DriverTest::SetUp() {
  ASSERT_CU(contract::session(&s_));
  ASSERT_CU(cuCtxSetCurrent(s_->context));
}

void DriverTest::TearDown() {
  // Work a test left behind must not have failed.
  if (s_) {
    EXPECT_CU(cuCtxSynchronize());
  }
}

int DriverTest::attribute(CUdevice_attribute a) const {
  int v = 0;
  EXPECT_CU(cuDeviceGetAttribute(&v, a, s_->device));
  return v;
}

size_t DriverTest::total_memory() const {
  size_t free_bytes = 0, total = 0;
  EXPECT_CU(cuMemGetInfo(&free_bytes, &total));
  return total;
}
