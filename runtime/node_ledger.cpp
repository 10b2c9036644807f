#include "node_ledger.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>

#include "allocator/ranked_mutex.h"
#include "runtime/lock_rank.h"

#include "log.h"

namespace tierrt {

namespace {

constexpr std::size_t kTableBytes = sizeof(LedgerTable);

bool init_mutex(pthread_mutex_t* mu) {
  pthread_mutexattr_t a;
  if (pthread_mutexattr_init(&a) != 0) return false;
  const bool ok = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) == 0 &&
                  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) == 0 && pthread_mutex_init(mu, &a) == 0;
  pthread_mutexattr_destroy(&a);
  return ok;
}

void sleep_ms(long ms) {
  timespec t{ms / 1000, (ms % 1000) * 1'000'000};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

// Whether the process in a slot is still the one that took it.
bool alive(const LedgerSlot& s) noexcept {
  if (kill(s.pid, 0) != 0 && errno == ESRCH) return false;
  // Alive or another user's (EPERM: the pid was reused, ledgers are per
  // user): the start time tells.
  std::uint64_t start = 0;
  bool exited = false;
  if (!process_start(s.pid, &start, &exited)) return false;
  return !exited && start == s.start_ticks;
}

}  // namespace

bool process_start(pid_t pid, std::uint64_t* start_ticks, bool* exited) noexcept {
  char path[40];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // "PID (COMM) STATE ..." where COMM may hold anything: fields count from
  // the last ')'. STATE is field 3, the start time field 22.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return false;
  p += 2;
  *exited = *p == 'Z' || *p == 'X';
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  char* end = nullptr;
  *start_ticks = std::strtoull(p, &end, 10);
  return end != p;
}

NodeLedger::NodeLedger(const std::string& name, std::uint64_t budget) : name_(name) {
  bool created = true;
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    created = false;
    fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  }
  if (fd < 0) {
    error_ = "cannot open the node ledger " + name + ": " + std::strerror(errno);
    return;
  }
  if (created) {
    if (ftruncate(fd, kTableBytes) != 0) {
      error_ = "cannot size the node ledger " + name + ": " + std::strerror(errno);
      close(fd);
      shm_unlink(name.c_str());
      return;
    }
  } else {
    // Its creator sizes it right after creating it: wait for that (a
    // mapping past the object's end faults).
    struct stat st {};
    for (int i = 0; i < 200 && (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kTableBytes)); ++i)
      sleep_ms(10);
    if (st.st_size < static_cast<off_t>(kTableBytes)) {
      error_ = "the node ledger " + name + " was never initialised (its creator died?); remove /dev/shm" + name;
      close(fd);
      return;
    }
  }
  void* m = mmap(nullptr, kTableBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    error_ = "cannot map the node ledger " + name + ": " + std::strerror(errno);
    return;
  }
  auto* t = static_cast<LedgerTable*>(m);
  if (created) {
    // A new object is zero-filled: every slot free.
    t->budget = budget;
    if (!init_mutex(&t->mu)) {
      error_ = "cannot make the node ledger's mutex";
      munmap(m, kTableBytes);
      return;
    }
    t->ready.store(LedgerTable::kReady, std::memory_order_release);
  } else {
    for (int i = 0; i < 200 && t->ready.load(std::memory_order_acquire) != LedgerTable::kReady; ++i) sleep_ms(10);
    if (t->ready.load(std::memory_order_acquire) != LedgerTable::kReady) {
      error_ = "the node ledger " + name + " was never initialised (its creator died?); remove /dev/shm" + name;
      munmap(m, kTableBytes);
      return;
    }
  }
  table_ = t;
  std::uint64_t start = 0;
  bool exited = false;
  if (!process_start(getpid(), &start, &exited)) {
    error_ = "cannot read this process's start time";
    return;
  }
  if (!lock()) {
    error_ = "the node ledger's mutex is unusable";
    return;
  }
  slot_ = take_slot_locked(getpid(), start);
  if (slot_ < 0 && reclaim_dead_locked()) slot_ = take_slot_locked(getpid(), start);
  unlock();
  if (slot_ < 0) error_ = "the node ledger " + name + " has no free slot (more ranks than it holds)";
}

NodeLedger::~NodeLedger() {
  if (table_ == nullptr) return;
  if (slot_ >= 0 && lock()) {
    table_->slots[slot_] = LedgerSlot{};
    unlock();
  }
  munmap(table_, kTableBytes);
}

std::uint64_t NodeLedger::budget() const noexcept { return table_ ? table_->budget : 0; }

namespace {
// The process-shared mutex joins this process's lock-order witness.
constexpr LockId kLedgerLock{kRankNodeLedger, "node.ledger"};
}  // namespace

bool NodeLedger::lock() noexcept {
  lock_witness::check(kLedgerLock);
  const int r = pthread_mutex_lock(&table_->mu);
  if (r == EOWNERDEAD) {
    // Its holder died; each update is one store to its slot, so the table
    // is whole. The holder's own bytes return once it is seen gone.
    if (pthread_mutex_consistent(&table_->mu) != 0) {
      pthread_mutex_unlock(&table_->mu);
      return false;
    }
  } else if (r != 0) {
    return false;
  }
  lock_witness::push(kLedgerLock);
  return true;
}

void NodeLedger::unlock() noexcept {
  lock_witness::pop(kLedgerLock);
  pthread_mutex_unlock(&table_->mu);
}

std::uint64_t NodeLedger::sum_locked() const noexcept {
  std::uint64_t sum = 0;
  for (const LedgerSlot& s : table_->slots)
    if (s.pid != 0) sum += s.bytes;
  return sum;
}

bool NodeLedger::reclaim_dead_locked() noexcept {
  bool freed = false;
  for (int i = 0; i < LedgerTable::kSlots; ++i) {
    LedgerSlot& s = table_->slots[i];
    if (i == slot_ || s.pid == 0 || alive(s)) continue;
    s = LedgerSlot{};
    freed = true;
  }
  return freed;
}

int NodeLedger::take_slot_locked(pid_t self, std::uint64_t start) noexcept {
  for (int i = 0; i < LedgerTable::kSlots; ++i) {
    if (table_->slots[i].pid != 0) continue;
    table_->slots[i] = LedgerSlot{self, start, 0};
    return i;
  }
  return -1;
}

std::uint64_t NodeLedger::held_by_all() noexcept {
  if (!ok() || !lock()) return 0;
  const std::uint64_t sum = sum_locked();
  unlock();
  return sum;
}

std::uint64_t NodeLedger::held_here() noexcept {
  if (!ok() || !lock()) return 0;
  const std::uint64_t b = table_->slots[slot_].bytes;
  unlock();
  return b;
}

bool NodeLedger::try_reserve(std::uint64_t bytes) noexcept {
  if (!ok() || !lock()) return false;
  const std::uint64_t budget = table_->budget;
  auto fits = [&] {
    const std::uint64_t sum = sum_locked();
    return bytes <= budget && sum <= budget - bytes;
  };
  // Dead ranks are looked for only when short of room: it reads /proc.
  const bool ok = fits() || (reclaim_dead_locked() && fits());
  if (ok) table_->slots[slot_].bytes += bytes;
  unlock();
  return ok;
}

void NodeLedger::release(std::uint64_t bytes) noexcept {
  if (!ok() || !lock()) return;
  std::uint64_t& held = table_->slots[slot_].bytes;
  held -= std::min(held, bytes);
  unlock();
}

std::string node_ledger_name(const std::string& key, std::uint64_t budget, unsigned uid, config::GetenvFn getenv_fn) {
  if (!getenv_fn) getenv_fn = [](const char* n) -> const char* { return std::getenv(n); };
  std::string k = key;
  if (k.empty()) {
    const char* job = nullptr;
    for (const char* var : {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE"})
      if (const char* v = getenv_fn(var); !job && v && *v) job = v;
    std::string j = job ? job : "local";
    // The id comes from the environment: only name-safe characters, bounded.
    for (char& c : j)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
    if (j.size() > 64) j.resize(64);
    k = j + "-" + std::to_string(budget);
  }
  return "/tierrt-node-" + std::to_string(uid) + "-" + k;
}

alloc::HostShare* process_node_ledger(const Settings& s) {
  if (s.node_host_budget == 0 || s.mode != Mode::Tier) return nullptr;
  static NodeLedger* ledger = [&] {
    auto* l = new NodeLedger(node_ledger_name(s.node_key, s.node_host_budget, getuid()), s.node_host_budget);
    if (!l->ok())
      TIERRT_LOG(Error, "%s; nothing will be spilled to host memory", l->error().c_str());
    else if (l->budget() != s.node_host_budget)
      TIERRT_LOG(Warn, "the node ledger %s holds a budget of %llu MiB, not TIERRT_NODE_HOST_BUDGET's %llu MiB; using it",
                 l->name().c_str(), static_cast<unsigned long long>(l->budget() >> 20),
                 static_cast<unsigned long long>(s.node_host_budget >> 20));
    return l;
  }();
  return ledger;
}

}  // namespace tierrt
