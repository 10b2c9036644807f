// trainer: a small, real training job on the CUDA driver API, the program
// the demo and the examples suite run with and without tierrt. Settings are
// key=value arguments (`trainer help`). It prints the loss of each step,
// then the bytes it held at its peak and a checksum of the weights: with
// the same settings both are the same on every run, tiered or not.
#include <dlfcn.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "data_loader.h"
#include "device_memory.h"
#include "driver_api.h"
#include "kernels.h"
#include "mlp.h"
#include "options.h"
#include "tierrt/tierrt.h"

namespace {

using namespace trainer;

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// tierrt's entry points when it is preloaded, looked up so that the trainer
// runs without it.
struct Tierrt {
  decltype(&tierrt_mark_step) mark_step =
      reinterpret_cast<decltype(&tierrt_mark_step)>(dlsym(RTLD_DEFAULT, "tierrt_mark_step"));
  decltype(&tierrt_get_stats) get_stats =
      reinterpret_cast<decltype(&tierrt_get_stats)>(dlsym(RTLD_DEFAULT, "tierrt_get_stats"));
};

void print_tierrt_stats(const Tierrt& t) {
  tierrt_stats s{};
  s.struct_size = sizeof s;
  if (!t.get_stats || t.get_stats(&s) != 0) return;
  std::printf("tierrt: device peak %.1f MiB of a %.1f MiB budget (%.1f MiB untiered); %" PRIu64
              " spills (%.1f MiB), %" PRIu64 " fetches (%.1f MiB, %" PRIu64 " on demand); %" PRIu64
              " steps marked, %" PRIu64 " learned\n",
              mib(s.device_peak_bytes), mib(s.device_budget), mib(s.peak_bytes_untiered), s.spills,
              mib(s.bytes_spilled), s.fetches, mib(s.bytes_fetched), s.demand_fetches, s.steps_marked,
              s.steps_learned);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  const Driver d = load_driver();
  check(d, d.cuInit(0), "cuInit");
  CUdevice device = 0;
  CUcontext ctx = nullptr;
  check(d, d.cuDeviceGet(&device, 0), "cuDeviceGet");
  check(d, d.cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
  check(d, d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  const Kernels kernels = load_kernels(d, o.kernel_us);

  const Tierrt tierrt;
  if (o.mark_steps && !tierrt.mark_step) std::printf("trainer: mark-steps=1, but tierrt is not loaded\n");
  std::printf("trainer: %u layers of width %u, batch %u, %u steps, seed %" PRIu64 ", lr %g%s%s\n", o.layers, o.width,
              o.batch, o.steps, o.seed, static_cast<double>(o.lr), o.mark_steps ? ", steps marked" : "",
              o.launch_blocking ? ", launches blocking" : "");
  std::fflush(stdout);

  CUstream compute = nullptr;
  check(d, d.cuStreamCreate(&compute, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  float* loss = nullptr;
  check(d, d.cuMemAllocHost(reinterpret_cast<void**>(&loss), sizeof(float)), "cuMemAllocHost");
  {
    DeviceMemory memory(d);
    Mlp model(d, memory, kernels, compute, o.layers, o.width, o.batch, o.seed, o.lr, o.launch_blocking);
    DataLoader loader(d, memory, o.batch, o.width, o.seed);
    loader.issue(1);
    for (unsigned step = 1; step <= o.steps; ++step) {
      memory.set_step(step);
      const auto start = std::chrono::steady_clock::now();
      const Batch batch = loader.take(step, compute);
      if (step < o.steps) loader.issue(step + 1);
      model.train_step(step, batch, loss);
      check(d, d.cuStreamSynchronize(compute), "cuStreamSynchronize");
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      uint32_t bits = 0;
      std::memcpy(&bits, loss, sizeof bits);
      std::printf("step %u loss %.9g 0x%08" PRIx32 " time %.1f ms\n", step, static_cast<double>(*loss), bits, ms);
      std::fflush(stdout);
      if (o.mark_steps && tierrt.mark_step) tierrt.mark_step();
    }
    std::printf("weights checksum %016" PRIx64 "\n", model.checksum());
    std::printf("peak bytes held %" PRIu64 " (%.1f MiB); device memory in use peaked at %.1f MiB of %.1f MiB\n",
                memory.peak_bytes(), mib(memory.peak_bytes()), mib(memory.peak_device_in_use()),
                mib(memory.device_total()));
    model.release();
  }
  print_tierrt_stats(tierrt);
  check(d, d.cuStreamSynchronize(compute), "cuStreamSynchronize");
  check(d, d.cuMemFreeHost(loss), "cuMemFreeHost");
  check(d, d.cuStreamDestroy(compute), "cuStreamDestroy");
  check(d, d.cuDevicePrimaryCtxRelease(device), "cuDevicePrimaryCtxRelease");
  return 0;
}
