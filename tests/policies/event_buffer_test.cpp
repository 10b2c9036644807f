// The engine's event buffer keeps every event it was given, in order, across
// the growths that move its pages, and reuses its memory after clear().
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <utility>

#include "policies/event_buffer.hpp"

namespace tierrt::policy {
namespace {

Event nth(std::uint64_t i) { return Event::use(0x1000 + 8 * i, i, static_cast<StreamId>(i % 7)); }

void expect_first(const EventBuffer& b, std::uint64_t n) {
  ASSERT_EQ(n, b.size());
  for (std::uint64_t i = 0; i < n; ++i) {
    const Event want = nth(i);
    ASSERT_TRUE(b[i].kind == want.kind && b[i].a == want.a && b[i].b == want.b && b[i].stream == want.stream)
        << "event " << i << " of " << n << " changed";
  }
}

TEST(EventBuffer, KeepsEveryEventInOrderAcrossGrowths) {
  EventBuffer b;
  EXPECT_TRUE(b.empty());
  // Past 8 first mappings' worth: the first mapping and four growths
  // (to 4, 8, 16 and 32 MiB), each of which may move the pages.
  const std::uint64_t n = 8 * (EventBuffer::kFirstBytes / sizeof(Event)) + 5;
  std::size_t growths = 0, capacity = b.capacity();
  for (std::uint64_t i = 0; i < n; ++i) {
    b.push_back(nth(i));
    if (b.capacity() != capacity) ++growths, capacity = b.capacity();
  }
  EXPECT_EQ(5u, growths);
  expect_first(b, n);
  const std::span<const Event> view = b;
  EXPECT_EQ(b.data(), view.data());
  EXPECT_EQ(n, view.size());
  EXPECT_EQ(n, static_cast<std::uint64_t>(b.end() - b.begin()));
}

TEST(EventBuffer, ResizeDropsTheTailAndClearKeepsTheMemory) {
  EventBuffer b;
  for (std::uint64_t i = 0; i < 1000; ++i) b.push_back(nth(i));
  b.resize(400);
  expect_first(b, 400);
  b.push_back(nth(400));
  expect_first(b, 401);
  const Event* at = b.data();
  const std::size_t capacity = b.capacity();
  b.clear();
  EXPECT_TRUE(b.empty());
  for (std::uint64_t i = 0; i < 1000; ++i) b.push_back(nth(i));
  EXPECT_EQ(at, b.data());
  EXPECT_EQ(capacity, b.capacity());
  expect_first(b, 1000);
}

TEST(EventBuffer, MovingHandsOverTheEvents) {
  EventBuffer a;
  for (std::uint64_t i = 0; i < 100; ++i) a.push_back(nth(i));
  EventBuffer b(std::move(a));
  EXPECT_EQ(0u, a.size());
  EXPECT_EQ(nullptr, a.data());
  expect_first(b, 100);
  EventBuffer c;
  c.push_back(nth(0));
  c = std::move(b);
  expect_first(c, 100);
  a.push_back(nth(0));  // a moved-from buffer is empty and usable
  expect_first(a, 1);
}

}  // namespace
}  // namespace tierrt::policy
