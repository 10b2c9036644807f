// A mutex with a rank and a name, and the lock-order witness that checks
// them (jemalloc's witness, in small). Each lock has a rank; a thread may
// take a lock only while every lock it holds has a lower rank. In builds with
// assertions (NDEBUG not defined) every thread keeps the locks it holds, and
// taking one out of order aborts, naming both locks: a lock-order inversion
// shows up the first time the code path runs, not the day two threads
// deadlock on it. Without assertions it is a plain std::mutex.
//
// BasicLockable and Lockable: std::lock_guard, std::unique_lock and
// std::condition_variable_any work with it. Depends on nothing of tierrt.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace tierrt {

class RankedMutex;

namespace lock_witness {
// The locks this thread holds, in the order taken (so ranks ascend).
struct Held {
  static constexpr int kMax = 16;
  int depth = 0;
  const RankedMutex* locks[kMax] = {};
};
// The default TLS model: under UBSan, GCC 12 computed an initial-exec
// address of this inline variable as null in test executables.
inline thread_local Held held;
}  // namespace lock_witness

class RankedMutex {
 public:
  constexpr RankedMutex(unsigned rank, const char* name) noexcept : rank_(rank), name_(name) {}
  RankedMutex(const RankedMutex&) = delete;
  RankedMutex& operator=(const RankedMutex&) = delete;

  void lock() {
    witness_acquire();
    m_.lock();
    witness_push();
  }
  bool try_lock() {
    if (!m_.try_lock()) return false;  // a try cannot deadlock: no order to check
    witness_push();
    return true;
  }
  void unlock() {
    witness_pop();
    m_.unlock();
  }

  unsigned rank() const noexcept { return rank_; }
  const char* name() const noexcept { return name_; }

 private:
#ifndef NDEBUG
  using Held = lock_witness::Held;
  static Held& held() noexcept { return lock_witness::held; }

  void witness_acquire() const noexcept {
    if (held().depth == 0) return;
    const RankedMutex* top = held().locks[held().depth - 1];
    if (rank_ > top->rank_) return;
    std::fprintf(stderr, "tierrt: lock order violation: taking \"%s\" (rank %u) while holding \"%s\" (rank %u)\n",
                 name_, rank_, top->name_, top->rank_);
    std::abort();
  }
  void witness_push() noexcept {
    if (held().depth == Held::kMax) {
      std::fprintf(stderr, "tierrt: more than %d locks held, taking \"%s\"\n", Held::kMax, name_);
      std::abort();
    }
    held().locks[held().depth++] = this;
  }
  void witness_pop() noexcept {
    // Usually the last one taken; std::unique_lock may release out of order.
    for (int i = held().depth - 1; i >= 0; --i)
      if (held().locks[i] == this) {
        for (int j = i; j + 1 < held().depth; ++j) held().locks[j] = held().locks[j + 1];
        --held().depth;
        return;
      }
  }
#else
  void witness_acquire() const noexcept {}
  void witness_push() noexcept {}
  void witness_pop() noexcept {}
#endif

  std::mutex m_;
  const unsigned rank_;
  const char* const name_;
};

}  // namespace tierrt
