#include "kernel_fault_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "state.h"

namespace simdev {

namespace {

struct GuardFrame {
  sigjmp_buf jump;
  uint64_t fault_address = 0;
};

// The kernel this thread is running under the guard, or null. initial-exec:
// the signal handler reads it without calling into the TLS allocator.
__attribute__((tls_model("initial-exec"))) thread_local GuardFrame* tl_frame = nullptr;

constexpr int kSignals[] = {SIGSEGV, SIGBUS};
struct sigaction g_previous[2];

struct sigaction& previous_action(int sig) { return g_previous[sig == SIGSEGV ? 0 : 1]; }

// Hands the fault to whoever handled it before simdev. With no handler (or an
// ignored fault, which cannot be ignored) the default action comes back and
// the faulting instruction, run again on return, ends the process with the
// signal.
void chain(int sig, siginfo_t* info, void* uctx) {
  const struct sigaction& prev = previous_action(sig);
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) {
      prev.sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
}

void on_fault(int sig, siginfo_t* info, void* uctx) {
  GuardFrame* frame = tl_frame;
  // si_code > 0: raised by the hardware access itself, not sent by kill().
  if (frame && info->si_code > 0 && state().memory.in_arena(reinterpret_cast<uint64_t>(info->si_addr))) {
    tl_frame = nullptr;
    frame->fault_address = reinterpret_cast<uint64_t>(info->si_addr);
    siglongjmp(frame->jump, 1);
  }
  chain(sig, info, uctx);
}

void install_handlers() {
  for (int sig : kSignals) {
    sigaction(sig, nullptr, &previous_action(sig));
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

// An alternate signal stack for each thread that runs kernels, unless the
// thread has one already (a sanitizer runtime installs its own), so that the
// handler runs whatever state the kernel left its stack in.
class AltStack {
 public:
  void ensure() {
    if (checked_) return;
    checked_ = true;
    stack_t current{};
    if (sigaltstack(nullptr, &current) != 0 || !(current.ss_flags & SS_DISABLE)) return;
    size_t bytes = SIGSTKSZ < 65536 ? 65536 : SIGSTKSZ;
    void* mem = std::malloc(bytes);
    if (!mem) return;
    stack_t ours{};
    ours.ss_sp = mem;
    ours.ss_size = bytes;
    if (sigaltstack(&ours, nullptr) != 0) {
      std::free(mem);
      return;
    }
    mem_ = mem;
  }
  ~AltStack() {
    if (!mem_) return;
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, nullptr);
    std::free(mem_);
  }

 private:
  bool checked_ = false;
  void* mem_ = nullptr;
};

thread_local AltStack tl_alt_stack;

}  // namespace

CUresult run_guarded_kernel(simdev_kernel_fn fn, const simdev_launch* launch, uint64_t* fault_address) {
  static std::once_flag installed;
  std::call_once(installed, install_handlers);
  tl_alt_stack.ensure();
  GuardFrame frame;
  if (sigsetjmp(frame.jump, 1) != 0) {
    if (fault_address) *fault_address = frame.fault_address;
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  tl_frame = &frame;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  fn(launch);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  tl_frame = nullptr;
  return CUDA_SUCCESS;
}

}  // namespace simdev
