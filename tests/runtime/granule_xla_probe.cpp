// A program that allocates like XLA, for granule_groups_test.sh: each step
// makes one temporary allocation holding every buffer of the step at fixed
// offsets (a workspace every kernel reuses, then one activation per layer),
// kernels name the buffers' starts, the forward pass writes the activations
// and the backward pass reads them in reverse, every word checked.
//   granule_xla_probe [steps [layers [activation MiB [kernel us]]]]
// Ends with one line: "xla: bad_words=... peak_device_mib=... step_ms=...".
#include <cstdlib>

#include "tests/runtime/granule_probe_support.h"

using namespace granule_probe;

int main(int argc, char** argv) {
  const Shape shape = shape_of(argc, argv);
  const int steps = shape.steps, layers = shape.layers;
  const std::size_t act = shape.act;
  Kernels k;
  if (!set_up(&k, shape.kernel_ns)) {
    std::printf("FAIL: runs on simdev only\n");
    return 1;
  }
  // XLA aligns buffers finely: the activations start inside granules.
  const std::size_t ws_bytes = (4u << 20) + (256u << 10);
  const std::size_t temp_bytes = ws_bytes + layers * act;
  const std::size_t words = act / 4;
  CUstream s = nullptr;
  CUdeviceptr bad = 0;
  if (!ok(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "stream") || !ok(cuMemAlloc(&bad, 8), "bad counter") ||
      !ok(cuMemsetD32(bad, 0, 2), "bad counter zeroed"))
    return 1;
  std::vector<double> step_ms;
  std::uint64_t bad_words = 0;
  for (int step = 0; step < steps; ++step) {
    const double t0 = now_ms();
    CUdeviceptr temp = 0;
    if (!ok(cuMemAlloc(&temp, temp_bytes), "the step's temporary allocation")) return 1;
    const CUdeviceptr ws = temp;
    if (step == 0) {
      // Tiered whole or per granule group, the allocation is one mapping to
      // the application, as cuMemAlloc's: an interior pointer says so.
      CUdeviceptr base = 0;
      std::size_t mapping = 0;
      const CUdeviceptr inside = temp + temp_bytes / 2;
      if (!ok(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, inside), "mapping base") ||
          !ok(cuPointerGetAttribute(&mapping, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, inside), "mapping size"))
        return 1;
      if (base != temp || mapping < temp_bytes) {
        std::printf("FAIL: an interior pointer's mapping is [0x%llx, +%zu), not the allocation [0x%llx, +%zu)\n",
                    static_cast<unsigned long long>(base), mapping, static_cast<unsigned long long>(temp), temp_bytes);
        return 1;
      }
    }
    auto act_at = [&](int l) { return temp + ws_bytes + l * act; };
    auto seed = [&](int l) { return static_cast<std::uint32_t>(step * 1000 + l + 1); };
    mark_phase(TIERRT_PHASE_FORWARD);
    for (int l = 0; l < layers; ++l) {
      if (l > 0 && !ok(consume(k, s, act_at(l - 1), words, seed(l - 1), ws, bad), "forward read")) return 1;
      if (!ok(produce(k, s, act_at(l), words, seed(l), ws), "forward write")) return 1;
    }
    mark_phase(TIERRT_PHASE_BACKWARD);
    for (int l = layers - 1; l >= 0; --l)
      if (!ok(consume(k, s, act_at(l), words, seed(l), ws, bad), "backward read")) return 1;
    if (!ok(cuMemcpyDtoHAsync(&bad_words, bad, 8, s), "bad counter read") || !ok(cuStreamSynchronize(s), "step end"))
      return 1;
    if (!ok(cuMemFree(temp), "the step's temporary freed")) return 1;
    mark_step();
    step_ms.push_back(now_ms() - t0);
  }
  report("xla", bad_words, step_ms, steps / 2);
  return bad_words == 0 ? 0 : 1;
}
