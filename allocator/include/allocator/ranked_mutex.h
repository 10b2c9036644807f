// Mutexes with a rank and a name, and the lock-order witness that checks
// them (jemalloc's witness, in small). Each lock has a rank; a thread may
// take a lock only while every lock it holds has a lower rank. In builds with
// assertions (NDEBUG not defined) every thread keeps the locks it holds, and
// taking one out of order aborts, naming both locks: a lock-order inversion
// shows up the first time the code path runs, not the day two threads
// deadlock on it. Without assertions they are a plain std::mutex and
// std::shared_mutex.
//
// Every mutex of tierrt is one of these; the ranks are in docs/design.md
// (allocator/lock_rank.h, runtime/lock_rank.h). A lock that is not a
// std::mutex (the node ledger's process-shared one) joins the witness with a
// LockId, lock_witness::check before it blocks, push once it holds the lock
// and pop when it lets go.
//
// BasicLockable and Lockable (the shared one SharedLockable too):
// std::lock_guard, std::unique_lock, std::shared_lock and
// std::condition_variable_any work with them. Depends on nothing of tierrt.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>

namespace tierrt {

// A lock's place in the order.
struct LockId {
  unsigned rank;
  const char* name;
};

namespace lock_witness {
// The locks this thread holds, in the order taken (so ranks ascend).
struct Held {
  static constexpr int kMax = 16;
  int depth = 0;
  const LockId* locks[kMax] = {};
};
// The default TLS model: under UBSan, GCC 12 computed an initial-exec
// address of this inline variable as null in test executables.
inline thread_local Held held;

#ifndef NDEBUG
// Before blocking on `id`: aborts unless it ranks above every lock held.
inline void check(const LockId& id) noexcept {
  if (held.depth == 0) return;
  const LockId* top = held.locks[held.depth - 1];
  if (id.rank > top->rank) return;
  std::fprintf(stderr, "tierrt: lock order violation: taking \"%s\" (rank %u) while holding \"%s\" (rank %u)\n",
               id.name, id.rank, top->name, top->rank);
  std::abort();
}
inline void push(const LockId& id) noexcept {
  if (held.depth == Held::kMax) {
    std::fprintf(stderr, "tierrt: more than %d locks held, taking \"%s\"\n", Held::kMax, id.name);
    std::abort();
  }
  held.locks[held.depth++] = &id;
}
inline void pop(const LockId& id) noexcept {
  // Usually the last one taken; std::unique_lock may release out of order.
  for (int i = held.depth - 1; i >= 0; --i)
    if (held.locks[i] == &id) {
      for (int j = i; j + 1 < held.depth; ++j) held.locks[j] = held.locks[j + 1];
      --held.depth;
      return;
    }
}
#else
inline void check(const LockId&) noexcept {}
inline void push(const LockId&) noexcept {}
inline void pop(const LockId&) noexcept {}
#endif
}  // namespace lock_witness

class RankedMutex {
 public:
  constexpr RankedMutex(unsigned rank, const char* name) noexcept : id_{rank, name} {}
  RankedMutex(const RankedMutex&) = delete;
  RankedMutex& operator=(const RankedMutex&) = delete;

  void lock() {
    lock_witness::check(id_);
    m_.lock();
    lock_witness::push(id_);
  }
  bool try_lock() {
    if (!m_.try_lock()) return false;  // a try cannot deadlock: no order to check
    lock_witness::push(id_);
    return true;
  }
  void unlock() {
    lock_witness::pop(id_);
    m_.unlock();
  }

  unsigned rank() const noexcept { return id_.rank; }
  const char* name() const noexcept { return id_.name; }

 private:
  std::mutex m_;
  const LockId id_;
};

// Readers and writers share the rank: a reader that then takes a lower rank
// deadlocks against a writer as surely as a writer would.
class RankedSharedMutex {
 public:
  RankedSharedMutex(unsigned rank, const char* name) noexcept : id_{rank, name} {}
  RankedSharedMutex(const RankedSharedMutex&) = delete;
  RankedSharedMutex& operator=(const RankedSharedMutex&) = delete;

  void lock() {
    lock_witness::check(id_);
    m_.lock();
    lock_witness::push(id_);
  }
  bool try_lock() {
    if (!m_.try_lock()) return false;
    lock_witness::push(id_);
    return true;
  }
  void unlock() {
    lock_witness::pop(id_);
    m_.unlock();
  }
  void lock_shared() {
    lock_witness::check(id_);
    m_.lock_shared();
    lock_witness::push(id_);
  }
  bool try_lock_shared() {
    if (!m_.try_lock_shared()) return false;
    lock_witness::push(id_);
    return true;
  }
  void unlock_shared() {
    lock_witness::pop(id_);
    m_.unlock_shared();
  }

  unsigned rank() const noexcept { return id_.rank; }
  const char* name() const noexcept { return id_.name; }

 private:
  std::shared_mutex m_;
  const LockId id_;
};

}  // namespace tierrt
