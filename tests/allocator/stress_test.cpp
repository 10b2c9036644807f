// Randomized stress in both spill modes (at least 1e5 spill / fetch cycles in
// total, every block's checksum verified after every cycle) and many threads
// allocating, freeing, spilling and fetching at once.
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <random>
#include <thread>

#include "driver/driver.h"
#include "tests/allocator/sim_support.h"

namespace tierrt::alloc::testing {
namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * 1024;

std::size_t random_size(std::mt19937_64& rng) {
  const unsigned r = rng() % 100;
  if (r < 90) return 1 + rng() % (64 * KiB);  // most small
  if (r < 99) return 64 * KiB + rng() % (448 * KiB);
  return 1 * MiB + rng() % (3 * MiB);
}

struct Tracked {
  Block* b = nullptr;
  std::uint64_t sum = 0;       // checksum of what the block must hold
  CUstream writer = nullptr;   // the stream of the last write
  std::uint64_t seed = 0, previous_seed = 0;  // of the last fill and the one before
};

// Every fill of the Threads test: seed (t << 40) + n * kSeedStride is thread
// t's n-th fill, so that any word of any fill, mix(seed + offset), names its
// fill and offset (unmix): a block never reaches kSeedStride bytes.
constexpr std::uint64_t kSeedStride = std::uint64_t{1} << 23;
struct FillRecord {
  std::atomic<CUdeviceptr> va{0};
  std::atomic<std::size_t> size{0};
};
struct FillLog {
  static constexpr int kThreads = 8;
  std::vector<FillRecord> of[kThreads];
  std::atomic<std::uint64_t> count[kThreads] = {};
  void resize(std::size_t n) {
    for (auto& v : of) v = std::vector<FillRecord>(n);
  }
  std::uint64_t record(int t, CUdeviceptr va, std::size_t size) {
    const std::uint64_t n = count[t].load() + 1;
    if (n < of[t].size()) {
      of[t][n].va.store(va);
      of[t][n].size.store(size);
    }
    count[t].store(n);
    return (static_cast<std::uint64_t>(t) << 40) + n * kSeedStride;
  }
};

constexpr std::uint64_t inverse_mod_2_64(std::uint64_t c) {
  std::uint64_t x = c;  // Newton's iteration: each step doubles the good bits
  for (int i = 0; i < 6; ++i) x *= 2 - c * x;
  return x;
}

// The inverse of mix(): which seed + offset a word of a fill is.
constexpr std::uint64_t unmix(std::uint64_t x) {
  x ^= x >> 33;
  x *= inverse_mod_2_64(0xc4ceb9fe1a85ec53ull);
  x ^= x >> 33;
  x *= inverse_mod_2_64(0xff51afd7ed558ccdull);
  x ^= x >> 33;
  return x;
}
static_assert(unmix(mix(12345)) == 12345);

// Whose fill the 8 bytes at got[at + shift] are, for the shift that decodes
// (a copy from another offset need not keep the 8-byte phase), or "no fill's".
std::string whose_word(const std::vector<std::uint8_t>& got, std::size_t at, const FillLog& log) {
  for (std::size_t shift = 0; shift < 8 && at + shift + 8 <= got.size(); ++shift) {
    std::uint64_t w = 0;
    std::memcpy(&w, got.data() + at + shift, 8);
    const std::uint64_t x = unmix(w);
    const std::uint64_t th = x >> 40, n = (x & ((std::uint64_t{1} << 40) - 1)) / kSeedStride, off = x % kSeedStride;
    if (th >= FillLog::kThreads || n == 0 || n > log.count[th].load() || off % 8 != 0) continue;
    std::string where;
    if (n < log.of[th].size()) {
      const FillRecord& r = log.of[th][n];
      char b[96];
      std::snprintf(b, sizeof b, " (block 0x%llx, %zu bytes)", static_cast<unsigned long long>(r.va.load()),
                    r.size.load());
      where = b;
    }
    return "byte " + std::to_string(at + shift) + " is fill " + std::to_string(th) + ":" + std::to_string(n) +
           where + " at offset " + std::to_string(off);
  }
  return "byte " + std::to_string(at) + " is no fill's";
}

// What a block read back holds where it differs from pattern(seed): how many
// bytes, from where to where, and whether that is the fill before (a write
// lost to a move) or zeros (memory never written), and whose fill the wrong
// bytes are, where they begin, in the middle and where they end.
std::string describe_mismatch(const std::vector<std::uint8_t>& got, const Tracked& t, const FillLog& log) {
  const auto want = expected(got.size(), t.seed);
  const auto before = expected(got.size(), t.previous_seed);
  std::size_t bad = 0, first = got.size(), last = 0, stale = 0, zero = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    ++bad;
    first = std::min(first, i);
    last = i;
    stale += got[i] == before[i];
    zero += got[i] == 0;
  }
  const std::uint64_t mine = (t.seed & ((std::uint64_t{1} << 40) - 1)) / kSeedStride;
  char head[160];
  std::snprintf(head, sizeof head, "block 0x%llx (%zu bytes, state %s), fill %llu:%llu; ",
                static_cast<unsigned long long>(t.b->va), t.b->size, state_name(t.b->st()),
                static_cast<unsigned long long>(t.seed >> 40), static_cast<unsigned long long>(mine));
  const std::size_t mid = ((first + last) / 2) & ~std::size_t{7}, end = last >= 8 ? (last - 7) & ~std::size_t{7} : 0;
  return head + std::to_string(bad) + " bytes differ, in [" + std::to_string(first) + ", " +
         std::to_string(last + 1) + "); " + std::to_string(stale) + " of them as the fill before, " +
         std::to_string(zero) + " zero; " + whose_word(got, first & ~std::size_t{7}, log) + "; " +
         whose_word(got, mid, log) + "; " + whose_word(got, end, log);
}

// What any application does before using data on another stream than the
// one that wrote it. (tierrt adds no ordering between the application's
// streams: without it, reading there would race too.)
void order_after_writer(Tracked& t, CUstream s) {
  if (s == t.writer) return;
  CUevent e;
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, t.writer), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s, e, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventDestroy(e), CUDA_SUCCESS);
  t.writer = s;
}

std::uint64_t pattern_sum(std::size_t n, std::uint64_t seed) {
  const auto v = expected(n, seed);
  return checksum(v.data(), n);
}

class Stress : public ::testing::TestWithParam<SpillMode> {};

TEST_P(Stress, RandomSpillFetchCyclesKeepEveryByte) {
  Env::get().bind();
  Options o;
  o.mode = GetParam();
  apply_lazy_uses(&o);
  o.min_bytes = 1;  // small sizes become blocks too
  auto a = Allocator::create(o);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->mode(), GetParam());
  std::mt19937_64 rng(GetParam() == SpillMode::Remap ? 1 : 2);
  CUstream streams[4];
  for (auto& s : streams) CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  auto stream = [&] { return streams[rng() % 4]; };

  std::vector<Tracked> blocks(160);
  std::uint64_t seed = 1;
  auto refill = [&](Tracked& t, CUstream s) {
    order_after_writer(t, s);
    t.writer = s;
    ++seed;
    ASSERT_EQ(fill(*a, t.b, s, seed), CUDA_SUCCESS);
    t.sum = pattern_sum(t.b->size, seed);
  };
  for (auto& t : blocks) {
    CUdeviceptr p = 0;
    CUstream s = stream();
    CU_OK(a->allocate(&p, random_size(rng), s));
    t.b = a->lookup(p);
    refill(t, s);
  }
  // 5e4 per mode, 1e5 in all (STRESS_CYCLES overrides it for quick runs).
  const long target = std::getenv("STRESS_CYCLES") ? std::atol(std::getenv("STRESS_CYCLES")) : 50000;
  long cycles = 0;
  std::vector<std::uint8_t> buf;
  std::vector<std::size_t> batch;
  while (cycles < target) {
    batch.clear();
    for (int i = 0; i < 32; ++i) batch.push_back(rng() % blocks.size());
    std::sort(batch.begin(), batch.end());
    batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    for (std::size_t k : batch) {
      Tracked& t = blocks[k];
      if (rng() % 8 == 0) {  // sometimes a new block (size, stream) from the cache
        CUstream s = stream();
        order_after_writer(t, s);
        CU_OK(a->free(t.b->va, s));
        CUdeviceptr p = 0;
        CU_OK(a->allocate(&p, random_size(rng), s));
        t.b = a->lookup(p);
        refill(t, s);
      } else if (rng() % 3 == 0) {
        refill(t, stream());  // the spill must wait for this write
      }
      SpillResult r = a->spill(t.b);
      if (r == SpillResult::Busy) {
        a->drain();
        r = a->spill(t.b);
      }
      ASSERT_EQ(r, SpillResult::Started);
    }
    if (rng() % 16 == 0) {
      // Use some right away: the spill is aborted or demand-fetched.
      Tracked& t = blocks[batch[0]];
      CUstream s = stream();
      order_after_writer(t, s);
      CU_OK(read(*a, t.b, &buf, s));
      ASSERT_EQ(checksum(buf.data(), buf.size()), t.sum);
    }
    a->drain();
    for (std::size_t k : batch) {
      Tracked& t = blocks[k];
      const State st = t.b->st();
      ASSERT_TRUE(st == State::Spilled || st == State::Resident) << state_name(st);
      CUstream s = stream();
      order_after_writer(t, s);
      if (rng() % 2) CU_OK(a->prefetch(t.b, s));
      CU_OK(read(*a, t.b, &buf, s));
      ASSERT_EQ(checksum(buf.data(), buf.size()), t.sum) << "block " << k << " cycle " << cycles;
      ++cycles;
    }
  }
  const Stats st = a->stats();
  EXPECT_GE(st.spills, static_cast<std::uint64_t>(target));
  EXPECT_GE(st.fetches, static_cast<std::uint64_t>(target) * 9 / 10);
  for (auto& t : blocks) CU_OK(a->free(t.b->va, nullptr));
  CU_OK(cuCtxSynchronize());
  for (auto& s : streams) CU_OK(cuStreamDestroy(s));
  RecordProperty("cycles", static_cast<int>(cycles));
}

INSTANTIATE_TEST_SUITE_P(Allocator, Stress, ::testing::Values(SpillMode::Remap, SpillMode::Copy),
                         [](const auto& i) { return i.param == SpillMode::Remap ? "remap" : "copy"; });

class Threads : public ModeSuite {};

TEST_P(Threads, ManyThreadsAllocateFreeSpillAndFetch) {
  Env::get().bind();
  Options o;
  o.mode = GetParam();
  apply_lazy_uses(&o);
  o.min_bytes = 64 * KiB;
  o.device_budget = 192 * MiB;  // tight: rescues spill other threads' blocks
  auto a = Allocator::create(o);
  ASSERT_NE(a, nullptr);
  constexpr int kThreads = 8, kSlots = 12;
  // Fewer under ThreadSanitizer (run-tests sets it), where every copied byte is checked.
  const int iterations = std::getenv("THREADS_ITERATIONS") ? std::atoi(std::getenv("THREADS_ITERATIONS")) : 600;
  static_assert(kThreads == FillLog::kThreads);
  std::atomic<Block*> shared[kThreads * kSlots] = {};
  FillLog fills;
  fills.resize(static_cast<std::size_t>(iterations) + 2);
  std::atomic<long> failures{0}, ops{0};
  std::mutex why_mu;
  std::vector<std::string> why;
  auto fail = [&](const char* what, CUresult r) {
    failures++;
    std::lock_guard<std::mutex> g(why_mu);
    why.push_back(std::string(what) + ": " + drv::result_name(r));
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      Env::get().bind();
      std::mt19937_64 rng(100 + t);
      CUstream s;
      if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        failures++;
        return;
      }
      Tracked mine[kSlots];
      std::uint64_t seed = 0;
      std::vector<std::uint8_t> buf;
      for (int it = 0; it < iterations; ++it) {
        const int k = static_cast<int>(rng() % kSlots);
        Tracked& m = mine[k];
        const unsigned op = rng() % 10;
        if (m.b == nullptr) {
          CUdeviceptr p = 0;
          const std::size_t n = rng() % 4 == 0 ? 100 + rng() % 4000 : 64 * KiB + rng() % (6 * MiB);
          if (CUresult r = a->allocate(&p, n, s); r != CUDA_SUCCESS) {
            fail("allocate", r);
            continue;
          }
          m.b = a->lookup(p);
          if (m.b == nullptr) {  // a small slab allocation: just free it later
            if (a->free(p, s) != CUDA_SUCCESS) failures++;
            continue;
          }
          seed = fills.record(t, m.b->va, m.b->size);
          if (CUresult r = fill(*a, m.b, s, seed); r != CUDA_SUCCESS) fail("fill new", r);
          m.sum = pattern_sum(n, seed);
          m.previous_seed = m.seed = seed;
          shared[t * kSlots + k].store(m.b);
        } else if (op < 3) {
          if (CUresult r = read(*a, m.b, &buf, s); r != CUDA_SUCCESS) fail("read", r);
          else if (checksum(buf.data(), buf.size()) != m.sum)
            fail(("checksum: " + describe_mismatch(buf, m, fills)).c_str(), CUDA_SUCCESS);
        } else if (op < 4) {
          shared[t * kSlots + k].store(nullptr);
          if (CUresult r = read(*a, m.b, &buf, s); r != CUDA_SUCCESS) fail("read before free", r);
          else if (checksum(buf.data(), buf.size()) != m.sum)
            fail(("checksum before free: " + describe_mismatch(buf, m, fills)).c_str(), CUDA_SUCCESS);
          if (CUresult r = a->free(m.b->va, s); r != CUDA_SUCCESS) fail("free", r);
          m.b = nullptr;
        } else if (op < 7) {
          // Spill anybody's block (it may be in use, moving or even freed).
          if (Block* v = shared[rng() % (kThreads * kSlots)].load()) (void)a->spill(v);
        } else if (op < 8) {
          if (Block* v = shared[rng() % (kThreads * kSlots)].load()) (void)a->prefetch(v, s);
        } else {
          seed = fills.record(t, m.b->va, m.b->size);
          if (CUresult r = fill(*a, m.b, s, seed); r != CUDA_SUCCESS) fail("refill", r);
          m.sum = pattern_sum(m.b->size, seed);
          m.previous_seed = m.seed;
          m.seed = seed;
        }
        ops++;
      }
      for (int k = 0; k < kSlots; ++k) {
        Tracked& m = mine[k];
        if (m.b == nullptr) continue;
        shared[t * kSlots + k].store(nullptr);
        if (CUresult r = read(*a, m.b, &buf, s); r != CUDA_SUCCESS) fail("final read", r);
        else if (checksum(buf.data(), buf.size()) != m.sum)
          fail(("final checksum: " + describe_mismatch(buf, m, fills)).c_str(), CUDA_SUCCESS);
        if (CUresult r = a->free(m.b->va, s); r != CUDA_SUCCESS) fail("final free", r);
      }
      if (cuStreamSynchronize(s) != CUDA_SUCCESS) failures++;
      cuStreamDestroy(s);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0) << ::testing::PrintToString(why);
  EXPECT_GT(ops.load(), 0);
  a->drain();
  const Stats st = a->stats();
  EXPECT_GT(st.spills, 0u);
  // A broken invariant the mover contains stops tiering (every spill then
  // refused, every rescue gives up): the run would go on, past the budget.
  const char* stopped = a->tiering_stopped();
  EXPECT_EQ(stopped, nullptr) << "tiering stopped: " << stopped;
  EXPECT_LE(st.device_peak, 192 * MiB) << "over_budget " << st.over_budget << ", rescues " << st.rescues
                                        << ", spills " << st.spills << ", demand fetches " << st.demand_fetches
                                        << ", refused host full " << st.spills_refused_host_full;
  CU_OK(cuCtxSynchronize());
}

INSTANTIATE_TEST_SUITE_P(Allocator, Threads, every_mode_param(), mode_param_name);

}  // namespace
}  // namespace tierrt::alloc::testing
