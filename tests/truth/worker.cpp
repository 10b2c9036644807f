#include "worker.h"

#include <cstdio>
#include <cstdlib>

#include "simdev/simdev.h"

namespace truth {

void Tally::merge(const Tally& o) {
  for (const auto& [k, v] : o.ops) ops[k] += v;
  for (const auto& [k, v] : o.errors) errors[k] += v;
  faults_armed += o.faults_armed;
  failed_calls += o.failed_calls;
  bytes_checked += o.bytes_checked;
  bytes_unknown += o.bytes_unknown;
  wrong_bytes += o.wrong_bytes;
}

Worker::Worker(const Driver& d, const Kernels& k, const Options& o, unsigned index,
               const std::atomic<bool>& faults_possible)
    : d_(d), k_(k), o_(o), index_(index), faults_possible_(faults_possible),
      rng_(o.seed * 7919 + index), cap_bytes_(o.cap_bytes / o.threads), graphs_on_(o.graphs) {
  streams_[0] = nullptr;
  for (int s = 1; s < kStreams; ++s)
    if (d_.stream_create(&streams_[s], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) fatal("cuStreamCreate failed");
  for (CUevent& e : events_)
    if (d_.event_create(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) fatal("cuEventCreate failed");
}

void Worker::enter(CUcontext ctx) {
  if (d_.ctx_set_current(ctx) != CUDA_SUCCESS) fatal("cuCtxSetCurrent failed");
}

// Through the per-thread entry points the NULL stream is this thread's
// default stream; CU_STREAM_PER_THREAD names the same stream explicitly.
CUstream Worker::handle(int s) {
  if (s == 0) return coin() ? nullptr : CU_STREAM_PER_THREAD;
  return streams_[s];
}

void Worker::fatal(const std::string& why) {
  std::fprintf(stderr, "random_program: thread %u: %s\n", index_, why.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);
}

// A failed call is fine only while faults may be armed, and only with an
// error the driver documents for that call.
bool Worker::check(CUresult r, Call c) {
  if (r == CUDA_SUCCESS) return true;
  const std::string what = std::string(call_name(c)) + ": " + error_name(d_, r);
  ++tally_.errors[what];
  if (r != CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) ++tally_.failed_calls;
  if (!faults_possible_.load()) fatal(what + " with no fault armed");
  if (!driver_documents(c, r)) fatal(what + ", which the driver does not return for this call");
  return false;
}

// Work queued on `stream` from now on runs after everything queued so far
// on `last`.
void Worker::order_after(int stream, int last) {
  if (last < 0 || last == stream) return;
  if (check(d_.event_record(events_[last], handle(last)), Call::kEventRecord) &&
      check(d_.stream_wait_event(handle(stream), events_[last], 0), Call::kStreamWaitEvent))
    return;
  synchronize(last);
}

void Worker::order_for(int stream, const std::vector<int>& ids) {
  for (int id : ids) order_after(stream, blocks_.at(id).last_stream);
}

void Worker::used_on(int stream, const std::vector<int>& ids) {
  for (int id : ids) blocks_.at(id).last_stream = stream;
}

void Worker::synchronize(int s) {
  for (int attempt = 0;; ++attempt) {
    if (check(d_.stream_synchronize(handle(s)), Call::kStreamSynchronize)) break;
    if (attempt == 8) fatal("cuStreamSynchronize keeps failing");
  }
  stream_done(s);
}

// Everything queued on s so far has completed.
void Worker::stream_done(int s) {
  pending_host_[s].clear();
  for (auto& [id, b] : blocks_)
    if (b.last_stream == s) b.last_stream = -1;
}

void Worker::note(int id, const std::string& what) {
  auto& h = blocks_.at(id).history;
  if (h.size() == 8) h.erase(h.begin());
  h.push_back(what);
}

Worker::Range Worker::pick_range(const Block& b, bool full) {
  constexpr size_t kMaxWords = 64 * 1024;
  if (full) return {0, b.words()};
  size_t n = 1 + rand(std::min(b.words(), kMaxWords));
  return {rand(b.words() - n + 1), n};
}

// A random live block: data blocks, or tables when `tables`. -1 if none.
int Worker::pick_block(bool tables) {
  std::vector<int> ids;
  for (const auto& [id, b] : blocks_)
    if (b.is_table == tables) ids.push_back(id);
  return ids.empty() ? -1 : ids[rand(ids.size())];
}

// The block and its last operations on stderr, for a failure about it.
void Worker::describe(int id, const char* what) {
  const Block& b = blocks_.at(id);
  std::string h;
  for (const auto& e : b.history) h += "\n    " + e;
  std::fprintf(stderr, "random_program: thread %u: block %d (0x%llx, %zu bytes%s) %s; its last operations:%s\n", index_,
               id, static_cast<unsigned long long>(b.ptr), b.bytes, b.is_table ? ", pointer table" : "", what,
               h.c_str());
}

void Worker::read_and_compare(int id, Range r, int stream, bool async) {
  Block& b = blocks_.at(id);
  if (read_buffer_.size() < r.n) read_buffer_.resize(r.n);
  uint32_t* const host = read_buffer_.data();
  const CUdeviceptr src = b.ptr + r.off * 4;
  order_after(async ? stream : 0, b.last_stream);
  if (async) {
    if (!check(d_.dtoh_async(host, src, r.n * 4, handle(stream)), Call::kCopyAsync)) return;
    synchronize(stream);
  } else {
    const CUresult e = d_.dtoh(host, src, r.n * 4);
    if (e != CUDA_SUCCESS && !faults_possible_.load()) describe(id, "could not be read back");
    if (!check(e, Call::kCopy)) return;
    stream_done(0);
  }
  if (b.unknown) {
    tally_.bytes_unknown += r.n * 4;
    return;
  }
  tally_.bytes_checked += r.n * 4;
  const auto* got = reinterpret_cast<const uint8_t*>(host);
  const auto* want = reinterpret_cast<const uint8_t*>(b.mirror.data() + r.off);
  uint64_t wrong = 0;
  size_t first = 0;
  for (size_t i = 0; i < r.n * 4; ++i)
    if (got[i] != want[i] && wrong++ == 0) first = i;
  if (!wrong) return;
  tally_.wrong_bytes += wrong;
  std::string h;
  for (const auto& e : b.history) h += "\n    " + e;
  std::fprintf(stderr,
               "random_program: thread %u: block %d (%zu bytes%s) has %llu wrong bytes in words [%zu, %zu); "
               "first at byte %zu: 0x%02x, expected 0x%02x; its last operations:%s\n",
               index_, id, b.bytes, b.is_table ? ", pointer table" : "", static_cast<unsigned long long>(wrong),
               r.off, r.off + r.n, r.off * 4 + first, got[first], want[first], h.c_str());
}

void Worker::arm_fault() {
  const char* name = kFaultTargets[rand(kFaultTargetCount)];
  if (simdev_try_inject_fault(name, 1 + rand(3), 0) != 0) fatal(std::string("simdev cannot fail ") + name);
  ++tally_.faults_armed;
}

void Worker::run_ops(uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) step(i);
}

void Worker::check_and_release() {
  for (int s = 0; s < kStreams; ++s) synchronize(s);
  while (!graphs_.empty()) destroy_graph(graphs_.size() - 1);
  std::vector<int> ids;
  for (const auto& [id, b] : blocks_) ids.push_back(id);
  for (int id : ids) {
    read_and_compare(id, {0, blocks_.at(id).words()}, 0, false);
    if (!check(d_.mem_free(blocks_.at(id).ptr), Call::kMemFree)) fatal("cuMemFree failed with no fault armed");
    live_bytes_ -= blocks_.at(id).bytes;
    blocks_.erase(id);
  }
  for (CUevent e : events_) d_.event_destroy(e);
  for (int s = 1; s < kStreams; ++s) d_.stream_destroy(streams_[s]);
}

}  // namespace truth
