// Granule groups on simdev: a large allocation in remap mode is one VA range
// of member blocks, each mapped at its first use, spilled and fetched on its
// own, and freed with the allocation. The boundary bits the launch path
// learns (Group::learn, extent_end) are checked without a device.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "driver/driver.h"
#include "tests/allocator/sim_support.h"

namespace tierrt::alloc::testing {
namespace {

constexpr std::size_t MiB = 1u << 20;

std::unique_ptr<Allocator> make(SpillMode m, std::uint64_t group_bytes = 64 * MiB, std::uint64_t unit = 4 * MiB) {
  Env::get().bind();
  Options o;
  o.mode = m;
  o.group_bytes = group_bytes;
  o.group_unit = unit;
  CUresult r = CUDA_SUCCESS;
  auto a = Allocator::create(o, &r);
  EXPECT_EQ(r, CUDA_SUCCESS) << drv::result_name(r);
  return a;
}

// A group's bits without a device: members named at their first byte end
// an extent before them, members named inside end it after them.
TEST(GroupBoundaries, AnExtentEndsAtTheNextNamedStartOrAfterTheNextNamedInterior) {
  std::atomic<std::uint64_t> bits[4] = {};
  Group g;
  g.count = 100;
  g.boundaries = bits;
  EXPECT_EQ(g.extent_end(0, 0), 100u) << "nothing learned: to the end";
  EXPECT_EQ(g.extent_end(0, 8), 8u) << "capped";
  EXPECT_EQ(g.extent_end(95, 8), 100u) << "the cap never passes the end";
  g.learn(10, /*at_start=*/true);
  EXPECT_EQ(g.extent_end(0, 0), 10u);
  EXPECT_EQ(g.extent_end(3, 4), 7u);
  EXPECT_EQ(g.extent_end(10, 0), 100u) << "a member's own bit does not end its extent";
  g.learn(40, /*at_start=*/false);  // a buffer starts inside member 40: the one before may end there
  EXPECT_EQ(g.extent_end(11, 0), 41u);
  g.learn(63, true);  // bits across a word boundary (member 32 starts the second word)
  EXPECT_EQ(g.extent_end(41, 0), 63u);
  g.learn(64, false);
  EXPECT_EQ(g.extent_end(63, 0), 65u);
}

// Boundaries are learned per step: one launches stop naming still ends
// extents through the next step, and is forgotten after a whole step
// without it; one named again stays.
TEST(GroupBoundaries, ABoundaryLastNamedTwoStepsAgoIsForgotten) {
  std::atomic<std::uint64_t> bits[4] = {}, previous[4] = {};
  Group g;
  g.count = 100;
  g.boundaries = bits;
  g.previous = previous;
  g.learn(10, /*at_start=*/true);
  g.learn(40, /*at_start=*/true);
  g.new_step(4);
  EXPECT_EQ(g.extent_end(0, 0), 10u) << "learned in the step before";
  g.learn(40, true);  // named again; member 10 is not
  g.new_step(4);
  EXPECT_EQ(g.extent_end(0, 0), 40u) << "member 10's start was not named for a whole step";
  g.new_step(4);
  EXPECT_EQ(g.extent_end(0, 0), 100u);
}

class Groups : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = make(SpillMode::Remap);
    ASSERT_NE(a_, nullptr);
    ASSERT_TRUE(a_->groups_large_allocations());
  }
  // A 64 MiB group whose members 0 and 1 hold pattern(8) and pattern(7),
  // spilled member 1 (`spill_m1`), and the two-block list of a launch given
  // member 0: the member and the group's use record.
  void two_members(bool spill_m1 = false) {
    CU_OK(a_->allocate(&p_, 64 * MiB, nullptr));
    m0_ = a_->lookup(p_);
    m1_ = a_->lookup(p_ + 4 * MiB);
    group_[0] = m0_;
    group_[1] = m0_->group->record;
    CU_OK(fill(*a_, m1_, nullptr, 7));
    CU_OK(fill(*a_, m0_, nullptr, 8));
    // As an application must before another stream (a non-blocking one
    // does not wait for the legacy stream) writes the same bytes.
    CU_OK(cuStreamSynchronize(nullptr));
    a_->drain();
    if (!spill_m1) return;
    ASSERT_EQ(a_->spill(m1_), SpillResult::Started);
    a_->drain();
    ASSERT_EQ(m1_->st(), State::Spilled);
  }
  std::unique_ptr<Allocator> a_;
  CUdeviceptr p_ = 0;
  Block* m0_ = nullptr;
  Block* m1_ = nullptr;
  Block* group_[2] = {};
};

TEST_F(Groups, MembersCoverTheAllocationAndHoldNothingUntilUsed) {
  const std::size_t bytes = 64 * MiB + 3 * MiB + 5;  // 17 members of 4 MiB, the last 3 MiB + 5
  const Stats before = a_->stats();
  CUdeviceptr p = 0;
  CU_OK(a_->allocate(&p, bytes, nullptr));
  Block* first = a_->lookup(p);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(first->group, nullptr);
  const Group* g = first->group;
  EXPECT_EQ(g->va, p);
  EXPECT_EQ(g->count, 17u);
  EXPECT_EQ(g->bytes, bytes);
  std::size_t sum = 0;
  for (std::uint32_t i = 0; i < g->count; ++i) {
    Block* m = a_->lookup(p + i * g->unit + 12345 % g->unit);  // interior pointers find their member
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->group, g);
    EXPECT_EQ(m->member, i);
    EXPECT_EQ(m->va, p + i * g->unit);
    EXPECT_TRUE(m->untouched.load());
    EXPECT_EQ(m->st(), State::Freed);
    sum += m->size;
  }
  EXPECT_EQ(sum, bytes);
  EXPECT_EQ(a_->lookup(p + 16 * 4 * MiB)->size, 3 * MiB + 5);
  const Stats s = a_->stats();
  EXPECT_EQ(s.device_used, before.device_used) << "no member was used";
  EXPECT_EQ(s.untouched_bytes, bytes);
  EXPECT_EQ(s.groups, 1u);
  EXPECT_EQ(a_->live_blocks({}), 0u) << "untouched members are no live blocks";
  CU_OK(a_->free(p, nullptr));
}

// The allocator turns every group's step at tierrt_mark_step (step_ended):
// a live group's, and a freed one's kept for the next group of its size
// (XLA allocates its temporaries anew each step).
TEST_F(Groups, EveryGroupLearnsItsBoundariesAfreshEachStep) {
  CUdeviceptr p = 0, q = 0;
  CU_OK(a_->allocate(&p, 64 * MiB, nullptr));
  Group* g = a_->lookup(p)->group;
  ASSERT_NE(g, nullptr);
  g->learn(5, /*at_start=*/true);
  a_->step_ended();
  EXPECT_EQ(g->extent_end(0, 0), 5u) << "learned in the step before";
  CU_OK(a_->free(p, nullptr));  // the step's temporary, freed before the step's marker
  a_->step_ended();
  CU_OK(a_->allocate(&q, 64 * MiB, nullptr));
  Group* again = a_->lookup(q)->group;
  ASSERT_EQ(again, g) << "the group of this size, with what it learned";
  EXPECT_EQ(again->extent_end(0, 0), again->count) << "member 5's start was not named for a whole step";
  CU_OK(a_->free(q, nullptr));
}

TEST_F(Groups, AMemberIsMappedAtItsFirstUseAndMovesOnItsOwn) {
  CUdeviceptr p = 0;
  CU_OK(a_->allocate(&p, 128 * MiB, nullptr));
  const Stats before = a_->stats();
  Block* m3 = a_->lookup(p + 3 * 4 * MiB);
  Block* m4 = a_->lookup(p + 4 * 4 * MiB);
  CU_OK(fill(*a_, m3, nullptr, 33));
  CU_OK(fill(*a_, m4, nullptr, 44));
  EXPECT_EQ(m3->st(), State::Resident);
  EXPECT_FALSE(m3->untouched.load());
  EXPECT_EQ(a_->stats().device_used - before.device_used, 8 * MiB) << "two members of 4 MiB, nothing else";
  EXPECT_EQ(a_->stats().untouched_bytes, 120 * MiB);
  // One member spills; its neighbour stays; both read back bit for bit.
  a_->drain();
  ASSERT_EQ(a_->spill(m3), SpillResult::Started);
  a_->drain();
  ASSERT_EQ(m3->st(), State::Spilled);
  EXPECT_EQ(m4->st(), State::Resident);
  EXPECT_TRUE(m3->va_on_host) << "remap: a spilled member's VA reads over the link";
  std::vector<std::uint8_t> got;
  CU_OK(read(*a_, m4, &got));
  EXPECT_EQ(got, expected(4 * MiB, 44));
  EXPECT_EQ(m3->st(), State::Spilled) << "reading its neighbour fetched nothing";
  CU_OK(read(*a_, m3, &got));
  EXPECT_EQ(got, expected(4 * MiB, 33));
  a_->drain();  // the mover finalises the fetch on its own thread (FETCHING until then)
  EXPECT_EQ(m3->st(), State::Resident);
  CU_OK(a_->free(p, nullptr));
}

TEST_F(Groups, ASpilledMemberIsReadOverTheLinkByAKernelThatWasNotToldOfIt) {
  two_members(/*spill_m1=*/true);
  CUdeviceptr p = p_;
  Block* m0 = m0_;
  Block* m1 = m1_;
  // A checksum kernel over members 0 and 1, made resident for member 0 only
  // (an extent inferred too short): member 1 is read on its host copy.
  CUdeviceptr out = 0;
  CU_OK(cuMemAlloc(&out, 8));
  Block* named[1] = {m0};
  CU_OK(use_blocks(*a_, named, nullptr, [&] { return launch3(Env::get().k.sum, nullptr, p + 4 * MiB, 4 * MiB, out); }));
  std::uint64_t h = 0;
  CU_OK(cuMemcpyDtoH(&h, out, 8));
  const std::vector<std::uint8_t> want = expected(4 * MiB, 7);
  EXPECT_EQ(h, checksum(want.data(), want.size()));
  EXPECT_EQ(m1->st(), State::Spilled);
  CU_OK(cuMemFree(out));
  CU_OK(a_->free(p, nullptr));
}

// The group's fence (block.h, Group): a kernel given member 0 that writes
// member 1 (an extent inferred too short) is a use of the group. Member 1's
// spill copies only after it, and a launch naming the group meanwhile waits
// until member 1's VA is on its host copy.
TEST_F(Groups, ASpillWaitsForEveryUseOfItsGroupAndLaunchesNamingTheGroupWaitForTheSpill) {
  const Kernels& k = Env::get().k;
  two_members();
  CUdeviceptr out = 0;
  CU_OK(cuMemAlloc(&out, 8));
  Block *m0 = m0_, *m1 = m1_;
  CUstream s = nullptr;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  late_gate() = false;
  CU_OK(use_blocks(*a_, group_, s, [&] { return launch3(k.fill_late, s, m1->va, 4 * MiB, 99); }));
  ASSERT_EQ(a_->spill(m1), SpillResult::Started);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(m1->st(), State::Spilling) << "the copy waits for the kernel that reaches member 1";
  std::atomic<bool> enqueued{false};
  std::thread other([&] {
    Env::get().bind();
    Block* named[2] = {m0, m0->group->record};
    EXPECT_EQ(use_blocks(*a_, named, nullptr,
                         [&] {
                           enqueued = true;
                           return launch3(k.sum, nullptr, m0->va, 4 * MiB, out);
                         }),
              CUDA_SUCCESS);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_FALSE(enqueued.load()) << "a launch naming the group waits while a member's spill is in its window";
  late_gate() = true;
  other.join();
  EXPECT_TRUE(enqueued.load());
  a_->drain();
  EXPECT_EQ(m1->st(), State::Spilled);
  std::vector<std::uint8_t> got;
  CU_OK(read(*a_, m1, &got));
  EXPECT_EQ(got, expected(4 * MiB, 99)) << "the late write went with the spill";
  CU_OK(cuStreamDestroy(s));
  CU_OK(cuMemFree(out));
  CU_OK(a_->free(p_, nullptr));
}

// A fetch remaps the member only once every kernel of the group enqueued
// before it is done: one reaching the spilled member over the link would
// otherwise write its host copy after the fetch read it, or fault between
// the unmap and the map.
TEST_F(Groups, AFetchWaitsForEveryUseOfItsGroup) {
  const Kernels& k = Env::get().k;
  two_members(/*spill_m1=*/true);
  Block* m1 = m1_;
  CUstream s = nullptr;
  CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  late_gate() = false;
  CU_OK(use_blocks(*a_, group_, s, [&] { return launch3(k.fill_late, s, m1->va, 4 * MiB, 99); }));
  std::atomic<bool> read_back{false};
  std::vector<std::uint8_t> got;
  std::thread reader([&] {
    Env::get().bind();
    EXPECT_EQ(read(*a_, m1, &got), CUDA_SUCCESS);
    read_back = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_FALSE(read_back.load()) << "the fetch waits for the kernel that reaches member 1 over the link";
  late_gate() = true;
  reader.join();
  EXPECT_EQ(got, expected(4 * MiB, 99));
  CU_OK(cuStreamDestroy(s));
  CU_OK(a_->free(p_, nullptr));
}

// A kernel given member 0 may reach a member no launch named: the first
// launch naming the group maps them all, so nothing faults.
TEST_F(Groups, TheFirstLaunchNamingAGroupMapsEveryMember) {
  const Kernels& k = Env::get().k;
  CUdeviceptr p = 0;
  CU_OK(a_->allocate(&p, 64 * MiB + 5, nullptr));
  Block* m0 = a_->lookup(p);
  Block* m5 = a_->lookup(p + 20 * MiB);
  Block* group[2] = {m0, m0->group->record};
  CU_OK(use_blocks(*a_, group, nullptr, [&] { return launch3(k.fill, nullptr, m5->va, 4 * MiB, 5); }));
  CU_OK(cuCtxSynchronize());
  EXPECT_EQ(a_->stats().untouched_bytes, 0u);
  EXPECT_EQ(m5->st(), State::Resident);
  std::vector<std::uint8_t> got;
  CU_OK(read(*a_, m5, &got));
  EXPECT_EQ(got, expected(4 * MiB, 5));
  CU_OK(a_->free(p, nullptr));
}

// A graph that captured a launch naming the group may reach any member
// whenever it is launched: no member spills.
TEST_F(Groups, ACapturedGroupKeepsEveryMember) {
  two_members();
  Block* m1 = m1_;
  const std::span<Block* const> named{group_, 2};
  CU_OK(a_->ensure_resident(named, nullptr));
  CU_OK(a_->record_use(named, nullptr, /*capturing=*/true));
  a_->release(named);
  a_->drain();
  EXPECT_EQ(a_->spill(m1), SpillResult::Busy);
  EXPECT_EQ(m1->st(), State::Resident);
  CU_OK(a_->free(p_, nullptr));
}

TEST_F(Groups, AGroupIsFreedWholeOnceAndOnlyByItsStart) {
  const Stats before = a_->stats();
  CUdeviceptr p = 0;
  CU_OK(a_->allocate(&p, 96 * MiB, nullptr));
  for (std::size_t off : {0 * MiB, 40 * MiB, 92 * MiB}) CU_OK(fill(*a_, a_->lookup(p + off), nullptr, off));
  a_->drain();
  ASSERT_EQ(a_->spill(a_->lookup(p + 40 * MiB)), SpillResult::Started);
  a_->drain();
  EXPECT_EQ(a_->free(p + 4 * MiB, nullptr), CUDA_ERROR_INVALID_VALUE) << "a member's start is no allocation's";
  EXPECT_EQ(a_->free(p + 1, nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_OK(a_->free(p, nullptr));
  EXPECT_EQ(a_->lookup(p), nullptr);
  EXPECT_EQ(a_->lookup(p + 95 * MiB), nullptr);
  EXPECT_FALSE(a_->owns(p + 40 * MiB));
  EXPECT_EQ(a_->free(p, nullptr), CUDA_ERROR_INVALID_VALUE) << "a double free";
  const Stats s = a_->stats();
  EXPECT_EQ(s.groups, 0u);
  EXPECT_EQ(s.untouched_bytes, 0u);
  EXPECT_EQ(s.host_used, before.host_used) << "the spilled member's host copy went with it";
  for (int st = 0; st < kStateCount - 1; ++st) EXPECT_EQ(s.bytes[st], before.bytes[st]) << state_name(State(st));
  // The same size again: the group's objects and chunks are reused.
  CUdeviceptr q = 0;
  CU_OK(a_->allocate(&q, 96 * MiB, nullptr));
  CU_OK(fill(*a_, a_->lookup(q + 40 * MiB), nullptr, 1));
  std::vector<std::uint8_t> got;
  CU_OK(read(*a_, a_->lookup(q + 40 * MiB), &got));
  EXPECT_EQ(got, expected(4 * MiB, 1));
  CU_OK(a_->free(q, nullptr));
}

// A freed group keeps its resident members' chunks mapped for the next
// allocation of its size (parked_groups.h): XLA allocates its step's
// temporaries anew each step.
TEST_F(Groups, AGroupFreedIsParkedAndTheNextOfItsSizeTakesItsResidentMembersBack) {
  two_members(/*spill_m1=*/true);  // member 0 resident, member 1 spilled, the rest untouched
  const std::uint64_t host_before_free = a_->stats().host_used;
  CU_OK(a_->free(p_, nullptr));
  Stats s = a_->stats();
  EXPECT_EQ(s.parked_group_bytes, 4 * MiB) << "member 0's chunk is kept; a spilled or untouched member keeps none";
  EXPECT_LT(s.host_used, host_before_free) << "the spilled member's host copy went";
  EXPECT_EQ(s.groups, 0u);
  EXPECT_EQ(a_->lookup(p_), nullptr) << "a parked range names no block";
  EXPECT_FALSE(a_->owns(p_ + 4 * MiB));
  // Another size does not take it.
  CUdeviceptr other = 0;
  CU_OK(a_->allocate(&other, 68 * MiB, nullptr));
  EXPECT_NE(other, p_);
  EXPECT_EQ(a_->stats().parked_group_bytes, 4 * MiB);
  CU_OK(a_->free(other, nullptr));
  // The same size: the same range, member 0 resident at once.
  CUdeviceptr q = 0;
  CU_OK(a_->allocate(&q, 64 * MiB, nullptr));
  EXPECT_EQ(q, p_);
  Block* m0 = a_->lookup(q);
  Block* m1 = a_->lookup(q + 4 * MiB);
  ASSERT_NE(m0, nullptr);
  ASSERT_NE(m1, nullptr);
  EXPECT_EQ(m0->st(), State::Resident);
  EXPECT_FALSE(m0->untouched.load());
  EXPECT_TRUE(m1->untouched.load()) << "a member spilled at the free starts untouched, as in a new group";
  s = a_->stats();
  EXPECT_EQ(s.untouched_bytes, 60 * MiB);
  EXPECT_EQ(s.groups, 1u);
  // Both hold what is written to them now, member 0 through its kept chunk.
  CU_OK(fill(*a_, m0, nullptr, 21));
  CU_OK(fill(*a_, m1, nullptr, 22));
  std::vector<std::uint8_t> got;
  CU_OK(read(*a_, m0, &got));
  EXPECT_EQ(got, expected(4 * MiB, 21));
  CU_OK(read(*a_, m1, &got));
  EXPECT_EQ(got, expected(4 * MiB, 22));
  // And a spill and fetch of the member whose chunk was kept.
  a_->drain();
  ASSERT_EQ(a_->spill(m0), SpillResult::Started);
  a_->drain();
  ASSERT_EQ(m0->st(), State::Spilled);
  CU_OK(read(*a_, m0, &got));
  EXPECT_EQ(got, expected(4 * MiB, 21));
  CU_OK(a_->free(q, nullptr));
}

// Parked chunks hold budget as spares do: a reservation that does not fit
// releases them before it spills a live block.
TEST(GroupsParked, TheRescueReleasesAParkedGroupBeforeItSpillsAnything) {
  Env::get().bind();
  Options o;
  o.mode = SpillMode::Remap;
  o.group_bytes = 64 * MiB;
  o.group_unit = 4 * MiB;
  o.device_budget = 64 * MiB;
  CUresult r = CUDA_SUCCESS;
  auto a = Allocator::create(o, &r);
  ASSERT_EQ(r, CUDA_SUCCESS) << drv::result_name(r);
  CUdeviceptr live = 0, g = 0, big = 0;
  CU_OK(a->allocate(&live, 16 * MiB, nullptr));  // a block that could be spilled
  Block* b = a->lookup(live);
  CU_OK(fill(*a, b, nullptr, 5));
  CU_OK(a->allocate(&g, 64 * MiB, nullptr));
  for (int i = 0; i < 8; ++i) CU_OK(fill(*a, a->lookup(g + i * 4 * MiB), nullptr, i));  // 32 MiB resident
  CU_OK(cuStreamSynchronize(nullptr));
  a->drain();
  CU_OK(a->free(g, nullptr));
  ASSERT_EQ(a->stats().parked_group_bytes, 32 * MiB);
  // 16 + 32 held of 64: 32 MiB more does not fit until the parked group goes.
  const std::uint64_t spills = a->stats().spills;
  CU_OK(a->allocate(&big, 32 * MiB, nullptr));
  a->drain();
  const Stats s = a->stats();
  EXPECT_EQ(s.parked_group_bytes, 0u);
  EXPECT_EQ(s.spills, spills) << "a live block was spilled while a parked group held memory";
  EXPECT_EQ(b->st(), State::Resident);
  EXPECT_LE(s.device_used, 64 * MiB);
  std::vector<std::uint8_t> got;
  CU_OK(read(*a, b, &got));
  EXPECT_EQ(got, expected(16 * MiB, 5));
  CU_OK(a->free(big, nullptr));
  CU_OK(a->free(live, nullptr));
}

TEST_F(Groups, AGroupLargerThanTheDeviceWorksWhereItIsUsed) {
  size_t device = 0;
  CU_OK(cuDeviceTotalMem(&device, Env::get().dev));
  CUdeviceptr p = 0;
  CU_OK(a_->allocate(&p, 2 * device, nullptr));
  // Members far apart, each used once and read back.
  for (std::size_t off : {std::size_t{0}, device - 4 * MiB, 2 * device - 4 * MiB}) {
    Block* m = a_->lookup(p + off);
    ASSERT_NE(m, nullptr);
    CU_OK(fill(*a_, m, nullptr, off + 1));
    std::vector<std::uint8_t> got;
    CU_OK(read(*a_, m, &got));
    EXPECT_EQ(got, expected(m->size, off + 1));
  }
  EXPECT_LE(a_->stats().device_used, 16 * MiB);
  CU_OK(a_->free(p, nullptr));
}

TEST_F(Groups, SmallAllocationsStayWhole) {
  CUdeviceptr p = 0;
  CU_OK(a_->allocate(&p, 64 * MiB - 1, nullptr));
  EXPECT_EQ(a_->lookup(p)->group, nullptr);
  EXPECT_EQ(a_->lookup(p)->mapped, 64 * MiB);
  CU_OK(a_->free(p, nullptr));
}

TEST(GroupsInCopyMode, LargeAllocationsAreTieredWhole) {
  auto a = make(SpillMode::Copy);
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(a->groups_large_allocations());
  CUdeviceptr p = 0;
  CU_OK(a->allocate(&p, 128 * MiB, nullptr));
  EXPECT_EQ(a->lookup(p)->group, nullptr);
  EXPECT_EQ(a->lookup(p)->size, 128 * MiB);
  CU_OK(a->free(p, nullptr));
}

}  // namespace
}  // namespace tierrt::alloc::testing
