// simdev turns a host kernel's fault on device address space into
// CUDA_ERROR_ILLEGAL_ADDRESS; every other fault still reaches the handler the
// application installed, or crashes the process as it would without simdev.
#include <signal.h>
#include <sys/wait.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "simdev_test.h"

namespace {

constexpr const char* kPoke = "simdev_test_poke";

// (u32* p): writes one word at p.
void poke_host(const simdev_launch* l) {
  unsigned int* p = nullptr;
  std::memcpy(&p, l->params[0], sizeof p);
  *reinterpret_cast<volatile unsigned int*>(p) = 1;
}

CUresult poke(CUfunction f, uint64_t address) {
  void* params[] = {&address};
  return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
}

class KernelFaultTest : public SimdevTest {
 protected:
  void SetUp() override {
    SimdevTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    static const size_t kSizes[] = {8};
    const simdev_kernel_desc desc = {kPoke, poke_host, 1, kSizes, nullptr, 0};
    ASSERT_EQ(0, simdev_try_register_kernel(&desc));
    ASSERT_CU(load_any_module(&module_));
    ASSERT_CU(cuModuleGetFunction(&poke_, module_, kPoke));
  }
  void TearDown() override {
    if (module_) {
      EXPECT_CU(cuModuleUnload(module_));
    }
    SimdevTest::TearDown();
  }

  // A host page nothing may touch: outside simdev's device address space.
  static uint64_t forbidden_host_page() {
    void* p = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? 0 : reinterpret_cast<uint64_t>(p);
  }

  CUmodule module_ = nullptr;
  CUfunction poke_ = nullptr;
};

void exit_42(int) { _exit(42); }

}  // namespace

TEST_F(KernelFaultTest, AKernelFaultOutsideDeviceMemoryStillCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        poke(poke_, forbidden_host_page());
        cuCtxSynchronize();
        std::_Exit(0);
      },
      // The process does not survive: killed by the fault's own signal, or,
      // under a sanitizer whose SEGV handler reports the fault, aborted or
      // ended with the sanitizer's exit code.
      [](int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); },
      "");
}

TEST_F(KernelFaultTest, TheApplicationsHandlerStillSeesItsOwnFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        struct sigaction sa {};
        sa.sa_handler = exit_42;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, nullptr);
        // A fault on device memory is simdev's: the kernel stops there.
        CUdeviceptr freed = 0;
        if (cuMemAlloc(&freed, 1 << 20) != CUDA_SUCCESS || cuMemFree(freed) != CUDA_SUCCESS) std::_Exit(1);
        if (poke(poke_, freed) != CUDA_SUCCESS) std::_Exit(2);
        if (cuCtxSynchronize() != CUDA_ERROR_ILLEGAL_ADDRESS) std::_Exit(3);
        // A fault anywhere else is the application's.
        *reinterpret_cast<volatile unsigned int*>(forbidden_host_page()) = 1;
        std::_Exit(4);
      },
      ::testing::ExitedWithCode(42), "");
}
