// Host memory on a node of ranks: the cgroup limit read from a cgroup tree,
// the default host budget it gives, the node budget's settings, and the
// shared ledger between processes (forked, no CUDA), including ranks
// killed with SIGKILL while holding a share or the ledger's mutex.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "allocator/host_budget.h"
#include "runtime/cgroup_memory.h"
#include "runtime/node_ledger.h"
#include "runtime/process_host_share.h"
#include "runtime/settings.h"

namespace tierrt {
namespace {

namespace fs = std::filesystem;
constexpr std::uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

// --- the cgroup limit -------------------------------------------------------

class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tierrt-cgroup-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& rel, const std::string& text) {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::uint64_t limit() { return cgroup_memory_limit((dir_ / "proc-cgroup").string(), (dir_ / "fs").string()); }
  fs::path dir_;
};

TEST_F(CgroupTree, V2MemoryMaxOfTheCgroupAndItsAncestors) {
  write("proc-cgroup", "0::/job/rank3\n");
  write("fs/job/rank3/memory.max", "8589934592\n");
  EXPECT_EQ(limit(), 8 * kGiB);
  write("fs/job/memory.max", "4294967296\n");  // a lower limit above it applies too
  EXPECT_EQ(limit(), 4 * kGiB);
}

TEST_F(CgroupTree, V2MaxIsNoLimit) {
  write("proc-cgroup", "0::/job\n");
  write("fs/job/memory.max", "max\n");
  write("fs/memory.max", "max\n");
  EXPECT_EQ(limit(), 0u);
}

TEST_F(CgroupTree, V2InACgroupNamespace) {
  // The listed path is the host's; only the namespace's root is mounted.
  write("proc-cgroup", "0::/kubepods/pod1/ctr\n");
  write("fs/memory.max", "2147483648\n");
  EXPECT_EQ(limit(), 2 * kGiB);
  write("proc-cgroup", "0::/\n");
  EXPECT_EQ(limit(), 2 * kGiB);
}

TEST_F(CgroupTree, V1LimitInBytes) {
  write("proc-cgroup", "12:pids:/x\n4:cpu,memory:/slurm/job7\n1:name=systemd:/y\n");
  write("fs/memory/slurm/job7/memory.limit_in_bytes", "3221225472\n");
  EXPECT_EQ(limit(), 3 * kGiB);
  // v1's "unlimited" is a huge number: read as is, the RAM bound is lower.
  write("fs/memory/slurm/job7/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(limit(), 9223372036854771712ull);
}

TEST_F(CgroupTree, HybridTakesTheLower) {
  write("proc-cgroup", "5:memory:/a\n0::/b\n");
  write("fs/memory/a/memory.limit_in_bytes", "3221225472\n");
  write("fs/b/memory.max", "1073741824\n");
  EXPECT_EQ(limit(), 1 * kGiB);
}

TEST_F(CgroupTree, MissingOrUnreadable) {
  EXPECT_EQ(limit(), 0u);  // no /proc listing
  write("proc-cgroup", "0::/job\n");
  EXPECT_EQ(limit(), 0u);  // no memory.max anywhere
  write("fs/job/memory.max", "lots\n");
  EXPECT_EQ(limit(), 0u);
  write("proc-cgroup", "garbage\n");
  EXPECT_EQ(limit(), 0u);
}

TEST(CgroupOfThisProcess, ReadsWithoutFailing) {
  const std::uint64_t l = cgroup_memory_limit();
  if (l != 0) {
    EXPECT_GT(l, 1 * kMiB);
  }
}

// --- the default host budget and the node settings ------------------------

std::map<std::string, std::string> g_env;
const char* fake_getenv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

TEST(DefaultHostBudget, HalfOfRamWithoutACgroupLimit) {
  Settings s;
  EXPECT_EQ(resolve(s, {80 * kGiB, 512 * kGiB, 0, 8}).host_budget, 256 * kGiB);
}

TEST(DefaultHostBudget, HalfOfTheCgroupLimitSharedByTheNodesRanks) {
  Settings s;
  EXPECT_EQ(resolve(s, {80 * kGiB, 512 * kGiB, 64 * kGiB, 0}).host_budget, 32 * kGiB);
  EXPECT_EQ(resolve(s, {80 * kGiB, 512 * kGiB, 64 * kGiB, 8}).host_budget, 4 * kGiB);
  // A limit above RAM (v1's "unlimited") leaves half of RAM.
  EXPECT_EQ(resolve(s, {80 * kGiB, 512 * kGiB, 9223372036854771712ull, 1}).host_budget, 256 * kGiB);
  // RAM unknown: the cgroup still bounds it.
  EXPECT_EQ(resolve(s, {80 * kGiB, 0, 64 * kGiB, 2}).host_budget, 16 * kGiB);
  // An explicit budget is the user's.
  s.host_budget = config::ByteSize::absolute(100 * kGiB);
  EXPECT_EQ(resolve(s, {80 * kGiB, 512 * kGiB, 64 * kGiB, 8}).host_budget, 100 * kGiB);
}

TEST(NodeSettings, BudgetAndKey) {
  g_env = {{"TIERRT_NODE_HOST_BUDGET", "96GiB"}, {"TIERRT_NODE_KEY", "train-7.a_b"}};
  Settings s;
  std::string err;
  ASSERT_TRUE(read_settings(&s, &err, &fake_getenv)) << err;
  EXPECT_EQ(s.node_host_budget, 96 * kGiB);
  EXPECT_EQ(s.node_key, "train-7.a_b");
  for (const auto& [var, bad] : std::map<std::string, std::string>{
           {"TIERRT_NODE_HOST_BUDGET", "50%"}, {"TIERRT_NODE_HOST_BUDGET", "0"}}) {
    g_env = {{var, bad}};
    EXPECT_FALSE(read_settings(&s, &err, &fake_getenv)) << var << "=" << bad;
    EXPECT_NE(err.find(var + "=\"" + bad + "\""), std::string::npos) << err;
  }
  for (const std::string& bad : {std::string("a/b"), std::string("key with space"), std::string("x%"),
                                 std::string(65, 'k')}) {
    g_env = {{"TIERRT_NODE_KEY", bad}};
    EXPECT_FALSE(read_settings(&s, &err, &fake_getenv)) << bad;
    EXPECT_NE(err.find("TIERRT_NODE_KEY"), std::string::npos) << err;
  }
}

TEST(NodeLedgerName, PerUserPerJobPerBudget) {
  g_env = {};
  EXPECT_EQ(node_ledger_name("mine", 5, 1000, &fake_getenv), "/tierrt-node-1000-mine");
  EXPECT_EQ(node_ledger_name("", 1024, 1000, &fake_getenv), "/tierrt-node-1000-local-1024");
  g_env = {{"TORCHELASTIC_RUN_ID", "run/9"}};
  EXPECT_EQ(node_ledger_name("", 1024, 7, &fake_getenv), "/tierrt-node-7-run_9-1024");
  g_env = {{"PMIX_NAMESPACE", "prterun-node1-123@1"}};
  EXPECT_EQ(node_ledger_name("", 1024, 7, &fake_getenv), "/tierrt-node-7-prterun-node1-123_1-1024");
  g_env["TORCHELASTIC_RUN_ID"] = "run/9";
  g_env["SLURM_JOB_ID"] = "4242";
  EXPECT_EQ(node_ledger_name("", 1024, 7, &fake_getenv), "/tierrt-node-7-4242-1024");
}

// --- the host budget beside a share ----------------------------------------

class CountingShare final : public alloc::HostShare {
 public:
  explicit CountingShare(std::uint64_t room) : room_(room) {}
  bool try_reserve(std::uint64_t n) noexcept override {
    if (held_ + n > room_) return false;
    held_ += n;
    return true;
  }
  void release(std::uint64_t n) noexcept override { held_ -= n; }
  std::uint64_t held_ = 0, room_;
};

TEST(HostBudgetWithAShare, HoldsBothOrNeither) {
  CountingShare share(3 * kMiB);
  alloc::HostBudget b(4 * kMiB);
  b.set_share(&share);
  EXPECT_TRUE(b.try_reserve(2 * kMiB));
  EXPECT_FALSE(b.try_reserve(2 * kMiB));  // the share is full, the own budget is not
  EXPECT_EQ(b.used(), 2 * kMiB);
  EXPECT_EQ(b.peak(), 2 * kMiB);  // a refused reservation is no peak
  EXPECT_EQ(share.held_, 2 * kMiB);
  share.room_ = 100 * kMiB;
  EXPECT_TRUE(b.try_reserve(2 * kMiB));
  EXPECT_FALSE(b.try_reserve(1));  // the own budget is full: the share keeps nothing
  EXPECT_EQ(share.held_, 4 * kMiB);
  b.release(4 * kMiB);
  EXPECT_EQ(b.used(), 0u);
  EXPECT_EQ(share.held_, 0u);
}

// The engines of one process (one per device) share its host budget, and
// with a node budget the node's share after it: both or neither.
TEST(ProcessHostShare, EnginesTogetherStayWithinTheProcessBudget) {
  CountingShare node(100 * kMiB);
  ProcessHostShare process(6 * kMiB, &node);
  alloc::HostBudget device0(6 * kMiB), device1(6 * kMiB);  // each engine's own: the process budget
  device0.set_share(&process);
  device1.set_share(&process);
  EXPECT_TRUE(device0.try_reserve(4 * kMiB));
  EXPECT_FALSE(device1.try_reserve(4 * kMiB));  // within device 1's own, not the process's
  EXPECT_TRUE(device1.try_reserve(2 * kMiB));
  EXPECT_EQ(process.used(), 6 * kMiB);
  EXPECT_EQ(node.held_, 6 * kMiB);
  device0.release(4 * kMiB);
  EXPECT_EQ(process.used(), 2 * kMiB);
  EXPECT_EQ(node.held_, 2 * kMiB);
  node.room_ = 2 * kMiB;  // the node is full: the process keeps nothing either
  EXPECT_FALSE(device0.try_reserve(1 * kMiB));
  EXPECT_EQ(process.used(), 2 * kMiB);
  EXPECT_EQ(node.held_, 2 * kMiB);
  ProcessHostShare alone(1 * kMiB, nullptr);  // without a node budget
  EXPECT_TRUE(alone.try_reserve(1 * kMiB));
  EXPECT_FALSE(alone.try_reserve(1));
  alone.release(1 * kMiB);
  EXPECT_EQ(alone.used(), 0u);
}

// --- the ledger between processes --------------------------------------------

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = "/tierrt-node-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    shm_unlink(name_.c_str());
  }
  void TearDown() override { shm_unlink(name_.c_str()); }

  // A child that opens the ledger, runs `body` and exits with its result.
  template <class F>
  pid_t spawn(F body) {
    const pid_t pid = fork();
    if (pid == 0) _exit(body());
    return pid;
  }
  static int exit_code(pid_t pid) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  // Waits for one byte from a child.
  static bool await(int fd) {
    char c = 0;
    return read(fd, &c, 1) == 1;
  }
  std::string name_;
};

TEST_F(LedgerTest, OneProcessWithinTheBudget) {
  NodeLedger l(name_, 10 * kMiB);
  ASSERT_TRUE(l.ok()) << l.error();
  EXPECT_EQ(l.budget(), 10 * kMiB);
  EXPECT_TRUE(l.try_reserve(6 * kMiB));
  EXPECT_FALSE(l.try_reserve(5 * kMiB));
  EXPECT_TRUE(l.try_reserve(4 * kMiB));
  EXPECT_FALSE(l.try_reserve(1));
  EXPECT_FALSE(l.try_reserve(UINT64_MAX));
  l.release(6 * kMiB);
  EXPECT_EQ(l.held_here(), 4 * kMiB);
  EXPECT_EQ(l.held_by_all(), 4 * kMiB);
  // A second opener keeps the creator's budget.
  NodeLedger other(name_, 99 * kMiB);
  ASSERT_TRUE(other.ok()) << other.error();
  EXPECT_EQ(other.budget(), 10 * kMiB);
  EXPECT_TRUE(other.try_reserve(6 * kMiB));
  EXPECT_FALSE(l.try_reserve(1));
}

// Eight ranks pin and unpin at random against one budget while this process
// samples: neither the ledger's total nor the bytes the ranks say they
// pinned ever pass it.
TEST_F(LedgerTest, EightRanksNeverPinMoreThanTheBudget) {
  constexpr std::uint64_t kUnit = kMiB, kBudget = 10 * kUnit;
  struct Shared {
    std::atomic<std::uint64_t> pinned, most, granted, refused;
    std::atomic<int> done;
  };
  void* m = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* sh = new (m) Shared{};
  NodeLedger checker(name_, kBudget);
  ASSERT_TRUE(checker.ok()) << checker.error();
  std::vector<pid_t> ranks;
  for (int r = 0; r < 8; ++r) {
    ranks.push_back(spawn([&, r] {
      NodeLedger l(name_, kBudget);
      if (!l.ok()) return 2;
      std::mt19937 rng(static_cast<unsigned>(r));
      for (int i = 0; i < 3000; ++i) {
        const std::uint64_t n = (1 + rng() % 4) * kUnit;
        if (!l.try_reserve(n)) {
          sh->refused.fetch_add(1);
          continue;
        }
        sh->granted.fetch_add(1);
        const std::uint64_t now = sh->pinned.fetch_add(n) + n;
        std::uint64_t most = sh->most.load();
        while (now > most && !sh->most.compare_exchange_weak(most, now)) {}
        if (rng() % 4 == 0) std::this_thread::yield();
        sh->pinned.fetch_sub(n);
        l.release(n);
      }
      sh->done.fetch_add(1);
      return 0;
    }));
  }
  std::uint64_t samples = 0;
  while (sh->done.load() < 8 && samples < 10'000'000) {
    ASSERT_LE(checker.held_by_all(), kBudget);
    ++samples;
  }
  for (pid_t p : ranks) EXPECT_EQ(exit_code(p), 0);
  EXPECT_LE(sh->most.load(), kBudget);
  EXPECT_GT(sh->granted.load(), 0u);
  EXPECT_GT(sh->refused.load(), 0u);  // the budget was contended
  EXPECT_EQ(checker.held_by_all(), 0u);
  EXPECT_GT(samples, 0u);
  munmap(m, sizeof(Shared));
}

// A rank killed while holding the whole budget: another gets it back once it
// sees the pid gone, before and after the dead rank is reaped.
TEST_F(LedgerTest, ASigkilledRanksShareComesBack) {
  constexpr std::uint64_t kBudget = 8 * kMiB;
  NodeLedger survivor(name_, kBudget);
  ASSERT_TRUE(survivor.ok()) << survivor.error();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t victim = spawn([&] {
    NodeLedger l(name_, kBudget);
    if (!l.ok() || !l.try_reserve(kBudget)) return 2;
    if (write(fds[1], "x", 1) != 1) return 3;
    pause();
    return 0;
  });
  ASSERT_TRUE(await(fds[0]));
  EXPECT_FALSE(survivor.try_reserve(kMiB));  // alive: its share is its own
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  // Not reaped yet: a zombie holds its pid, and counts as gone.
  bool back = false;
  for (int i = 0; i < 500 && !back; ++i) {
    back = survivor.try_reserve(kBudget);
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(back);
  EXPECT_EQ(exit_code(victim), 128 + SIGKILL);
  EXPECT_EQ(survivor.held_by_all(), kBudget);
  close(fds[0]);
  close(fds[1]);
}

// A rank killed while holding the ledger's mutex (and half the budget)
// deadlocks nobody: the next rank takes the mutex over, and the whole
// budget once it sees the dead rank gone.
TEST_F(LedgerTest, ARankKilledHoldingTheMutexDeadlocksNobody) {
  constexpr std::uint64_t kBudget = 8 * kMiB;
  NodeLedger survivor(name_, kBudget);
  ASSERT_TRUE(survivor.ok()) << survivor.error();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t victim = spawn([&] {
    NodeLedger l(name_, kBudget);
    if (!l.ok() || !l.try_reserve(kBudget / 2)) return 2;
    const int fd = shm_open(name_.c_str(), O_RDWR, 0);
    auto* t = static_cast<LedgerTable*>(mmap(nullptr, sizeof(LedgerTable), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (t == MAP_FAILED || pthread_mutex_lock(&t->mu) != 0) return 3;
    if (write(fds[1], "x", 1) != 1) return 4;
    pause();
    return 0;
  });
  ASSERT_TRUE(await(fds[0]));
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  EXPECT_EQ(exit_code(victim), 128 + SIGKILL);
  // A deadlock ends the test by SIGALRM rather than hanging the suite.
  alarm(30);
  EXPECT_TRUE(survivor.try_reserve(kBudget));
  EXPECT_FALSE(survivor.try_reserve(1));
  survivor.release(kBudget);
  EXPECT_TRUE(survivor.try_reserve(kBudget / 2));
  alarm(0);
  close(fds[0]);
  close(fds[1]);
}

// A slot whose pid now names another process (a reused pid: a different
// start time) is freed; one whose process is the same is not.
TEST_F(LedgerTest, AReusedPidIsNotTheRankThatHeldTheShare) {
  constexpr std::uint64_t kBudget = 8 * kMiB;
  NodeLedger l(name_, kBudget);
  ASSERT_TRUE(l.ok()) << l.error();
  const int fd = shm_open(name_.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  auto* t = static_cast<LedgerTable*>(mmap(nullptr, sizeof(LedgerTable), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  ASSERT_NE(t, MAP_FAILED);
  const pid_t parent = getppid();
  std::uint64_t start = 0;
  bool exited = true;
  ASSERT_TRUE(process_start(parent, &start, &exited));
  EXPECT_FALSE(exited);
  // The parent process holds the whole budget: alive, so it keeps it.
  ASSERT_EQ(pthread_mutex_lock(&t->mu), 0);
  t->slots[LedgerTable::kSlots - 1] = LedgerSlot{parent, start, kBudget};
  pthread_mutex_unlock(&t->mu);
  EXPECT_FALSE(l.try_reserve(kMiB));
  // The same pid with another start time: the holder is gone.
  ASSERT_EQ(pthread_mutex_lock(&t->mu), 0);
  t->slots[LedgerTable::kSlots - 1].start_ticks = start + 1;
  pthread_mutex_unlock(&t->mu);
  EXPECT_TRUE(l.try_reserve(kBudget));
  munmap(t, sizeof(LedgerTable));
}

TEST_F(LedgerTest, ALedgerThatCannotOpenRefusesEverySpill) {
  NodeLedger bad("/no/slashes/allowed", kMiB);
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(bad.error().empty());
  EXPECT_FALSE(bad.try_reserve(1));
  bad.release(1);
}

}  // namespace
}  // namespace tierrt
