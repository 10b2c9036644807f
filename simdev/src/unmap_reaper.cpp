#include "unmap_reaper.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace simdev {

namespace {

class Reaper {
 public:
  // False when the thread is not there (it could not start, or this is a
  // forked child, which has no copy of it): the caller unmaps itself.
  bool enqueue(uint64_t va, uint64_t size) {
    if (getpid() != owner_ || !running_) return false;
    {
      std::lock_guard lock(mu_);
      queue_.emplace_back(va, size);
    }
    cv_.notify_one();
    return true;
  }

  Reaper() : owner_(getpid()) {
    try {
      std::thread([this] { run(); }).detach();
      running_ = true;
    } catch (...) {
      running_ = false;
    }
  }

 private:
  void run() {
    pthread_setname_np(pthread_self(), "simdev-reaper");
    for (;;) {
      std::pair<uint64_t, uint64_t> r;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        r = queue_.front();
        queue_.pop_front();
      }
      munmap(reinterpret_cast<void*>(r.first), r.second);
    }
  }

  const pid_t owner_;
  bool running_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, uint64_t>> queue_;
};

}  // namespace

void unmap_later(uint64_t va, uint64_t size) {
  // Never destroyed: the thread may still run while the process exits.
  static Reaper* reaper = new Reaper;
  if (!reaper->enqueue(va, size)) munmap(reinterpret_cast<void*>(va), size);
}

}  // namespace simdev
