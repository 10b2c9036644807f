// Interleavings of a move with the application that a stress test meets
// once in thousands of runs, made to happen every time: simdev holds the
// mover's caller at a chosen driver call (simdev_inject_pause) while the
// test does what another thread could do meanwhile.
#include <simdev/simdev.h>

#include <chrono>
#include <thread>

#include "tests/allocator/sim_support.h"

namespace tierrt::alloc::testing {
namespace {

constexpr std::size_t KiB = 1u << 10, MiB = 1u << 20;

class MoveInterleaving : public ::testing::TestWithParam<SpillMode> {};

bool wait_for_state(const Block* b, State want) {
  for (int ms = 0; ms < 10'000; ++ms) {
    if (b->st() == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// A spill claims a small block, and before its copy is enqueued the block
// is freed (the spill is aborted) and handed out again, larger, from the
// cache. The copy still goes out; it must take no more bytes than the spill
// made room for. It once took the new size, and in copy mode wrote past its
// pinned buffer into the next one: the host copy of another spilled block
// (first found as a prefix of a live block replaced by the tail of another,
// about 1 in 15 runs of the Threads stress test on a loaded machine).
TEST_P(MoveInterleaving, BlockRevivedLargerWhileItsSpillIsEnqueued) {
  Env::get().bind();
  Options o;
  o.mode = GetParam();
  o.min_bytes = 64 * KiB;  // a block of its own, not a slab's
  auto a = Allocator::create(o);
  ASSERT_NE(a, nullptr);
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  CUdeviceptr small = 0, other = 0;
  CU_OK(a->allocate(&small, 64 * KiB, s));
  CU_OK(a->allocate(&other, 1 * MiB, s));
  Block* b = a->lookup(small);
  Block* c = a->lookup(other);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  CU_OK(fill(*a, b, s, 1));
  CU_OK(fill(*a, c, s, 2));
  CU_OK(cuStreamSynchronize(s));

  // The spill of `b` is held at its first cuEventRecord: the copy's timer,
  // after its host memory was prepared and before the copy is enqueued.
  ASSERT_EQ(simdev_inject_pause("cuEventRecord", 1), 0);
  SpillResult spilled = SpillResult::Failed;
  std::thread spiller([&] {
    Env::get().bind();
    spilled = a->spill(b);
  });
  ASSERT_EQ(simdev_wait_paused(10'000), 1) << "the spill never reached cuEventRecord";

  // Another spill meanwhile: in copy mode its pinned buffer follows b's.
  ASSERT_EQ(a->spill(c), SpillResult::Started);
  ASSERT_TRUE(wait_for_state(c, State::Spilled));

  // The application frees b and allocates again on the same stream: the
  // cache hands b's block out again, with a larger size.
  CU_OK(a->free(small, s));
  CUdeviceptr again = 0;
  CU_OK(a->allocate(&again, 3 * MiB / 2, s));
  ASSERT_EQ(again, small) << "the cache did not hand the block out again";
  ASSERT_EQ(a->lookup(again), b);
  CU_OK(fill(*a, b, s, 3));
  CU_OK(cuStreamSynchronize(s));

  simdev_release_pauses();
  spiller.join();
  EXPECT_EQ(spilled, SpillResult::Started);
  a->drain();

  std::vector<std::uint8_t> buf;
  CU_OK(read(*a, c, &buf, s));
  EXPECT_EQ(checksum(buf.data(), buf.size()), checksum(expected(1 * MiB, 2).data(), 1 * MiB))
      << "the other block's host copy was overwritten";
  CU_OK(read(*a, b, &buf, s));
  EXPECT_EQ(checksum(buf.data(), buf.size()), checksum(expected(3 * MiB / 2, 3).data(), 3 * MiB / 2));
  CU_OK(a->free(again, s));
  CU_OK(a->free(other, s));
  CU_OK(cuStreamSynchronize(s));
  CU_OK(cuStreamDestroy(s));
}

INSTANTIATE_TEST_SUITE_P(Allocator, MoveInterleaving, ::testing::Values(SpillMode::Remap, SpillMode::Copy),
                         [](const auto& i) { return i.param == SpillMode::Remap ? "remap" : "copy"; });

}  // namespace
}  // namespace tierrt::alloc::testing
