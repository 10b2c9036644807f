// A program that allocates like PyTorch's caching allocator, for
// granule_groups_test.sh: one large segment is taken from the driver once,
// and each step's tensors are carved out of it (first fit) and freed back
// to it, never to the driver: activations in the forward pass, a gradient
// per layer in the backward pass (in the space freed activations left),
// every word checked.
//   granule_caching_probe [steps [layers [activation MiB [kernel us [meminfo]]]]]
// With "meminfo" the segment is sized as a framework sizes its pool: 90% of
// the free memory cuMemGetInfo reports (with TIERRT_VIRTUAL_MEMINFO, more
// than the device holds).
// Ends with one line: "caching: bad_words=... peak_device_mib=... step_ms=...".
#include <cstdlib>
#include <map>
#include <string_view>

#include "tests/runtime/granule_probe_support.h"

using namespace granule_probe;

namespace {

// The segment's free ranges by offset, first fit, neighbours merged.
class Segment {
 public:
  explicit Segment(std::size_t bytes) { free_[0] = bytes; }
  // An offset, or SIZE_MAX when no range fits.
  std::size_t carve(std::size_t bytes) {
    bytes = (bytes + 511) & ~std::size_t{511};  // the caching allocator's 512-byte rounding
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      const std::size_t at = it->first, left = it->second - bytes;
      free_.erase(it);
      if (left) free_[at + bytes] = left;
      used_[at] = bytes;
      return at;
    }
    return SIZE_MAX;
  }
  void give(std::size_t at) {
    std::size_t len = used_.at(at);
    used_.erase(at);
    auto next = free_.find(at + len);
    if (next != free_.end()) {
      len += next->second;
      free_.erase(next);
    }
    auto it = free_.lower_bound(at);
    if (it != free_.begin() && std::prev(it)->first + std::prev(it)->second == at) {
      std::prev(it)->second += len;
      return;
    }
    free_[at] = len;
  }

 private:
  std::map<std::size_t, std::size_t> free_, used_;
};

}  // namespace

int main(int argc, char** argv) {
  const Shape shape = shape_of(argc, argv);
  const int steps = shape.steps, layers = shape.layers;
  const std::size_t act = shape.act;
  Kernels k;
  if (!set_up(&k, shape.kernel_ns)) {
    std::printf("FAIL: runs on simdev only\n");
    return 1;
  }
  const std::size_t words = act / 4, grad = act / 2;
  std::size_t segment_bytes = (layers + 1) * act + (2u << 20);
  if (argc > 5 && std::string_view(argv[5]) == "meminfo") {
    std::size_t free_bytes = 0, total_bytes = 0, device_bytes = 0;
    CUdevice dev = 0;
    if (!ok(cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo") || !ok(cuCtxGetDevice(&dev), "device") ||
        !ok(cuDeviceTotalMem(&device_bytes, dev), "cuDeviceTotalMem"))
      return 1;
    segment_bytes = free_bytes / 10 * 9;
    std::printf("pool: %.1f MiB on a device of %.1f MiB\n", segment_bytes / 1048576.0, device_bytes / 1048576.0);
  }
  CUstream s = nullptr;
  CUdeviceptr bad = 0, base = 0;
  if (!ok(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "stream") || !ok(cuMemAlloc(&bad, 8), "bad counter") ||
      !ok(cuMemsetD32(bad, 0, 2), "bad counter zeroed") || !ok(cuMemAlloc(&base, segment_bytes), "the segment"))
    return 1;
  Segment seg(segment_bytes);
  std::vector<double> step_ms;
  std::uint64_t bad_words = 0;
  std::vector<std::size_t> acts(layers);
  for (int step = 0; step < steps; ++step) {
    const double t0 = now_ms();
    auto seed = [&](int l, int kind) { return static_cast<std::uint32_t>(step * 1000 + kind * 100 + l + 1); };
    const std::size_t ws_at = seg.carve(1u << 20);  // the step's workspace, used by every kernel
    const CUdeviceptr ws = base + ws_at;
    mark_phase(TIERRT_PHASE_FORWARD);
    for (int l = 0; l < layers; ++l) {
      if ((acts[l] = seg.carve(act)) == SIZE_MAX) return std::printf("FAIL: the segment is full\n"), 1;
      if (l > 0 && !ok(consume(k, s, base + acts[l - 1], words, seed(l - 1, 0), ws, bad), "forward read")) return 1;
      if (!ok(produce(k, s, base + acts[l], words, seed(l, 0), ws), "forward write")) return 1;
    }
    mark_phase(TIERRT_PHASE_BACKWARD);
    for (int l = layers - 1; l >= 0; --l) {
      const std::size_t g = seg.carve(grad);
      if (g == SIZE_MAX) return std::printf("FAIL: the segment is full\n"), 1;
      if (!ok(consume(k, s, base + acts[l], words, seed(l, 0), ws, bad), "backward read") ||
          !ok(produce(k, s, base + g, grad / 4, seed(l, 1), ws), "gradient write") ||
          !ok(consume(k, s, base + g, grad / 4, seed(l, 1), ws, bad), "gradient read"))
        return 1;
      // Back to the segment at once, as the caching allocator does: reuse
      // on the same stream is ordered after this work.
      seg.give(acts[l]);
      seg.give(g);
    }
    seg.give(ws_at);
    if (!ok(cuMemcpyDtoHAsync(&bad_words, bad, 8, s), "bad counter read") || !ok(cuStreamSynchronize(s), "step end"))
      return 1;
    mark_step();
    step_ms.push_back(now_ms() - t0);
  }
  report("caching", bad_words, step_ms, steps / 2);
  if (!ok(cuMemFree(base), "the segment freed")) return 1;
  return bad_words == 0 ? 0 : 1;
}
