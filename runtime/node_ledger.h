// The node's host ledger: the ranks of a job on one machine share
// TIERRT_NODE_HOST_BUDGET through a POSIX shared-memory table of
// {pid, start time, bytes} slots, one per rank, guarded by a process-shared
// robust mutex. A rank holds host bytes here before pinning them and gives
// them back when it frees them, so that together the ranks never pin more
// than the budget. A rank that dies (even by SIGKILL, even holding the
// mutex) blocks nobody: the next locker finds the mutex owner-dead and takes
// it over, and the dead rank's bytes return once another rank, short of
// room, sees its pid gone (or reused by a process started later).
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "allocator/host_share.h"
#include "runtime/config.h"
#include "runtime/settings.h"

namespace tierrt {

// The shared object's layout: the format every rank of a node maps.
struct LedgerSlot {
  pid_t pid;                  // 0: free
  std::uint64_t start_ticks;  // the process's start time (/proc/PID/stat field 22): tells a reused pid
  std::uint64_t bytes;        // what the rank holds
};

struct LedgerTable {
  static constexpr std::uint32_t kReady = 0x7469'6572;  // set once the creator initialised the table
  static constexpr int kSlots = 256;
  std::atomic<std::uint32_t> ready;
  pthread_mutex_t mu;  // process-shared, robust; guards every field below
  std::uint64_t budget;
  LedgerSlot slots[kSlots];
};

// Processes map it at different addresses: its atomic must work without a
// lock of the process's own.
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

class NodeLedger final : public alloc::HostShare {
 public:
  // Opens (creating it if it is the first) the ledger `name` with `budget`
  // bytes and takes a slot for this process. A ledger that already exists
  // keeps the budget it was created with. ok() says whether it worked; one
  // that did not refuses every reservation (the host tier stays empty,
  // nothing is lost) and error() says why.
  NodeLedger(const std::string& name, std::uint64_t budget);
  ~NodeLedger();
  NodeLedger(const NodeLedger&) = delete;
  NodeLedger& operator=(const NodeLedger&) = delete;

  bool ok() const noexcept { return table_ != nullptr && slot_ >= 0; }
  const std::string& error() const noexcept { return error_; }
  const std::string& name() const noexcept { return name_; }
  std::uint64_t budget() const noexcept;
  // Bytes the ledger's ranks hold together, and this process alone.
  std::uint64_t held_by_all() noexcept;
  std::uint64_t held_here() noexcept;

  bool try_reserve(std::uint64_t bytes) noexcept override;
  void release(std::uint64_t bytes) noexcept override;

 private:
  bool lock() noexcept;  // false: the mutex is unusable
  void unlock() noexcept;
  std::uint64_t sum_locked() const noexcept;
  // Frees the slots of processes that are gone; true when one was freed.
  bool reclaim_dead_locked() noexcept;
  int take_slot_locked(pid_t self, std::uint64_t start) noexcept;

  std::string name_;
  std::string error_;
  LedgerTable* table_ = nullptr;
  int slot_ = -1;
};

// The ledger's name: "/tierrt-node-UID-KEY", KEY being `key` when given,
// else the job's id (SLURM_JOB_ID, else TORCHELASTIC_RUN_ID, else
// PMIX_NAMESPACE, Open MPI's and other PMIx launchers', else "local")
// and the budget in bytes, so that unrelated jobs and users keep apart.
std::string node_ledger_name(const std::string& key, std::uint64_t budget, unsigned uid,
                             config::GetenvFn getenv_fn = nullptr);

// The process's ledger, opened once from the first settings that ask for
// one; null without a node budget or outside tier mode. A ledger that cannot be opened is logged and
// refuses every spill.
alloc::HostShare* process_node_ledger(const Settings& s);

// The start time of process `pid` in clock ticks since boot, and whether it
// has exited (a zombie counts as exited); false when it cannot be read.
bool process_start(pid_t pid, std::uint64_t* start_ticks, bool* exited) noexcept;

}  // namespace tierrt
