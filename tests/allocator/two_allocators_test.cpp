// Two allocators in copy mode in one process, as with two devices: each
// one's pinned buffers come from its own pool, whichever was made last, and
// one going away leaves the other's host copies intact.
#include <vector>

#include "tests/allocator/sim_support.h"

namespace tierrt::alloc::testing {
namespace {

constexpr std::size_t MiB = 1u << 20;

std::unique_ptr<Allocator> make_copy() {
  Env::get().bind();
  Options o;
  o.mode = SpillMode::Copy;
  o.pinned_chunk = 8 * MiB;  // a few blocks fill a chunk: the pool grows
  CUresult r = CUDA_SUCCESS;
  auto a = Allocator::create(o, &r);
  EXPECT_EQ(r, CUDA_SUCCESS);
  return a;
}

struct Filled {
  CUdeviceptr p = 0;
  Block* b = nullptr;
  std::uint64_t seed = 0;
};

Filled spilled_block(Allocator& a, CUstream s, std::size_t bytes, std::uint64_t seed) {
  Filled f;
  f.seed = seed;
  EXPECT_EQ(a.allocate(&f.p, bytes, s), CUDA_SUCCESS);
  f.b = a.lookup(f.p);
  EXPECT_NE(f.b, nullptr);
  if (f.b == nullptr) return f;
  EXPECT_EQ(fill(a, f.b, s, seed), CUDA_SUCCESS);
  EXPECT_EQ(a.spill(f.b), SpillResult::Started);
  a.drain();
  EXPECT_EQ(f.b->st(), State::Spilled);
  return f;
}

void expect_bytes(Allocator& a, const Filled& f, CUstream s) {
  std::vector<std::uint8_t> buf;
  ASSERT_EQ(read(a, f.b, &buf, s), CUDA_SUCCESS);
  EXPECT_EQ(checksum(buf.data(), buf.size()), checksum(expected(f.b->size, f.seed).data(), f.b->size))
      << "block of fill " << f.seed;
}

TEST(TwoCopyAllocators, EachCarvesFromItsOwnPoolAndOutlivesTheOther) {
  auto first = make_copy();
  auto second = make_copy();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  CUstream s;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  std::vector<Filled> kept;
  kept.push_back(spilled_block(*first, s, 3 * MiB, 1));  // the first arena
  const Filled other = spilled_block(*second, s, 3 * MiB, 2);  // the second, made later
  const std::uint64_t second_pool = second->stats().pinned_pool_bytes;
  // More than the first pool's chunk: its arena needs new extents now.
  for (std::uint64_t seed = 3; seed < 9; ++seed) kept.push_back(spilled_block(*first, s, 3 * MiB, seed));
  EXPECT_EQ(first->stats().spills_failed, 0u);
  EXPECT_GE(first->stats().pinned_pool_bytes, 7 * 3 * MiB) << "the first allocator's buffers are not in its pool";
  EXPECT_EQ(second->stats().pinned_pool_bytes, second_pool) << "the first allocator grew the second's pool";

  expect_bytes(*second, other, s);
  CU_OK(second->free(other.p, s));
  CU_OK(cuStreamSynchronize(s));
  second.reset();  // its pool goes

  for (const Filled& f : kept) expect_bytes(*first, f, s);
  // Spilled again after the second allocator went: the first's arena still
  // carves from its own pool.
  for (Filled& f : kept) {
    ASSERT_EQ(first->spill(f.b), SpillResult::Started);
    first->drain();
    expect_bytes(*first, f, s);
  }
  for (const Filled& f : kept) CU_OK(first->free(f.p, s));
  CU_OK(cuStreamSynchronize(s));
  CU_OK(cuStreamDestroy(s));
}

}  // namespace
}  // namespace tierrt::alloc::testing
