// The word the policy thread sleeps on (runtime/wake_word.h): a wake is
// never lost, whether it comes before, during or after the sleeper's look
// at what it waits for; a sleep ends at its timeout; and a wake with no
// thread asleep makes no system call (a launching thread's post to a thread
// that is not asleep costs it nothing more).
#include "runtime/wake_word.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace tierrt {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint64_t kLongNs = 5'000'000'000;  // far longer than any wake takes

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

TEST(WakeWord, AWakeAfterTheEpochWasReadEndsTheSleepAtOnce) {
  WakeWord w;
  const std::uint32_t e = w.epoch();
  w.wake();  // between the sleeper's look and its sleep
  const auto start = Clock::now();
  w.sleep(e, kLongNs);
  EXPECT_LT(seconds_since(start), 1.0) << "the sleep missed a wake that came after its epoch";
  EXPECT_EQ(0u, w.wake_calls()) << "no thread slept: the wake needed no system call";
}

TEST(WakeWord, ASleepingThreadIsWoken) {
  WakeWord w;
  std::atomic<bool> asleep{false};
  double slept = 0;
  std::thread sleeper([&] {
    const std::uint32_t e = w.epoch();
    asleep.store(true);
    const auto start = Clock::now();
    w.sleep(e, kLongNs);
    slept = seconds_since(start);
  });
  while (!asleep.load()) std::this_thread::yield();
  std::this_thread::sleep_for(20ms);  // well inside its futex wait
  w.wake();
  sleeper.join();
  EXPECT_LT(slept, 1.0);
  EXPECT_EQ(1u, w.wake_calls());
}

TEST(WakeWord, ASleepEndsAtItsTimeout) {
  WakeWord w;
  const auto start = Clock::now();
  w.sleep(w.epoch(), 20'000'000);
  const double s = seconds_since(start);
  EXPECT_GE(s, 0.019);
  EXPECT_LT(s, 2.0);
}

// The policy thread's pattern: read the epoch, look at the condition, sleep
// on that epoch. Producers set the condition and wake, in every interleaving
// the scheduler gives; a lost wake shows as a sleep that only its (long)
// timeout ended.
TEST(WakeWord, NoWakeIsLostUnderRacingWakers) {
  WakeWord w;
  std::atomic<std::uint64_t> posted{0}, taken{0};
  std::atomic<int> lost{0};
  std::atomic<bool> done{false};
  constexpr std::uint64_t kPosts = 20000;
  std::thread consumer([&] {
    while (!done.load() || taken.load() < posted.load()) {
      for (std::uint32_t e = w.epoch(); taken.load() == posted.load() && !done.load(); e = w.epoch()) {
        const auto start = Clock::now();
        w.sleep(e, 2'000'000'000);
        if (seconds_since(start) >= 1.9) lost.fetch_add(1);
      }
      taken.store(posted.load());
    }
  });
  std::thread producers[2];
  for (auto& p : producers)
    p = std::thread([&] {
      for (std::uint64_t i = 0; i < kPosts; ++i) {
        posted.fetch_add(1);
        w.wake();
        if (i % 64 == 0) std::this_thread::sleep_for(50us);  // let the consumer fall asleep now and then
      }
    });
  for (auto& p : producers) p.join();
  done.store(true);
  w.wake();
  consumer.join();
  EXPECT_EQ(0, lost.load()) << "a sleep ended only at its timeout: a wake was lost";
  EXPECT_EQ(2 * kPosts, taken.load());
  EXPECT_GT(w.wake_calls(), 0u) << "the consumer never slept: the test did not reach the futex";
}

}  // namespace
}  // namespace tierrt
