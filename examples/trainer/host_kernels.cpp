#include <cstdio>
#include <cstdlib>
#include <utility>

#include "kernels.h"
#include "simdev/simdev.h"

namespace trainer {

namespace {

// A body void(uint32_t index, P...) as a simdev host kernel: the launch's
// parameters are the index count, then P...; the kernel runs every index in
// order on the stream's worker.
template <typename Body>
struct HostKernel;

template <typename... P>
struct HostKernel<void (*)(uint32_t, P...)> {
  static constexpr size_t param_sizes[] = {sizeof(uint32_t), sizeof(P)...};
  static constexpr unsigned num_params = sizeof...(P) + 1;

  template <void (*Body)(uint32_t, P...), size_t... I>
  static void run_all(const simdev_launch* l, std::index_sequence<I...>) {
    const uint32_t count = *static_cast<const uint32_t*>(l->params[0]);
    for (uint32_t i = 0; i < count; ++i) Body(i, *static_cast<const P*>(l->params[I + 1])...);
  }

  template <void (*Body)(uint32_t, P...)>
  static void run(const simdev_launch* l) {
    run_all<Body>(l, std::index_sequence_for<P...>{});
  }
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "trainer: %s\n", what);
  std::exit(1);
}

CUfunction load(const Driver& d, CUmodule m, const simdev_kernel_desc& desc) {
  if (simdev_try_register_kernel(&desc) != 0) fail("simdev refused a kernel");
  CUfunction f = nullptr;
  check(d, d.cuModuleGetFunction(&f, m, desc.name), "cuModuleGetFunction");
  return f;
}

}  // namespace

Kernels load_kernels(const Driver& d, unsigned kernel_us) {
  Kernels k;
  CUmodule m = nullptr;
  if (simdev_present()) {
    // simdev resolves names against its registry: the image is a label.
    check(d, d.cuModuleLoadData(&m, "trainer kernels"), "cuModuleLoadData");
#define TRAINER_REGISTER(name, params, args, cost)                                                              \
  {                                                                                                             \
    using Host = HostKernel<decltype(&body::name)>;                                                             \
    k.name = load(d, m,                                                                                         \
                  {"trainer_" #name, &Host::run<&body::name>, Host::num_params, Host::param_sizes, nullptr,     \
                   static_cast<unsigned long long>(cost) * kernel_us * 1000ull});                               \
  }
    TRAINER_KERNELS(TRAINER_REGISTER)
#undef TRAINER_REGISTER
    return k;
  }
#ifdef TRAINER_GPU_MODULE
  check(d, d.cuModuleLoad(&m, TRAINER_GPU_MODULE), "cuModuleLoad(" TRAINER_GPU_MODULE ")");
#define TRAINER_GET(name, params, args, cost) \
  check(d, d.cuModuleGetFunction(&k.name, m, "trainer_" #name), "cuModuleGetFunction(trainer_" #name ")");
  TRAINER_KERNELS(TRAINER_GET)
#undef TRAINER_GET
  return k;
#else
  (void)kernel_us;
  fail("this build has no GPU kernels (nvcc was not found when it was configured): it runs on simdev only");
#endif
}

}  // namespace trainer
