// text/prefetcher.h: results in order, the queue bound, an exception reaching the consumer
// in its place (after the results before it, and again later), and early destruction
// while the producer waits for room or is inside make().
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "error_of.h"
#include "text/prefetcher.h"

using namespace tide;
using namespace tide::text;
using tide::test_util::error_of;

namespace {

// Waits (without a wall-clock assertion) until pred holds; fails the test after ~10 s.
template <class Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 10000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

}  // namespace

TEST(Prefetcher, ResultsInOrder) {
  Prefetcher<uint64_t> p([](uint64_t k) { return k * k; }, 3);
  for (uint64_t k = 0; k < 100; ++k) ASSERT_EQ(p.next(), k * k);
}

TEST(Prefetcher, ProducesAtMostDepthAhead) {
  std::atomic<uint64_t> made{0};
  Prefetcher<int> p([&](uint64_t k) { return int(made.fetch_add(1) + k * 0); }, 2);
  ASSERT_TRUE(eventually([&] { return made.load() == 2; }));
  // Nothing is taken: the producer stays at two.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(made.load(), 2u);
  EXPECT_EQ(p.next(), 0);
  ASSERT_TRUE(eventually([&] { return made.load() == 3; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(made.load(), 3u);
}

TEST(Prefetcher, ExceptionReachesTheConsumerInPlace) {
  Prefetcher<int> p(
      [](uint64_t k) {
        if (k == 3) throw Error("test", "batch 3 failed");
        return int(k);
      },
      4);
  EXPECT_EQ(p.next(), 0);
  EXPECT_EQ(p.next(), 1);
  EXPECT_EQ(p.next(), 2);
  EXPECT_EQ(error_of([&] { p.next(); }), "[test] batch 3 failed");
  EXPECT_EQ(error_of([&] { p.next(); }), "[test] batch 3 failed");
}

TEST(Prefetcher, OtherExceptionsPassAsTheyAre) {
  Prefetcher<int> p([](uint64_t) -> int { throw std::out_of_range("nothing left"); }, 1);
  EXPECT_THROW(p.next(), std::out_of_range);
}

TEST(Prefetcher, StopsEarlyWhileWaitingForRoom) {
  std::atomic<uint64_t> made{0};
  {
    Prefetcher<std::string> p([&](uint64_t k) { return std::to_string(made.fetch_add(1) + k); }, 2);
    ASSERT_TRUE(eventually([&] { return made.load() == 2; }));
  }  // the producer waits for room: the destructor wakes and joins it
  EXPECT_EQ(made.load(), 2u);
}

TEST(Prefetcher, StopsEarlyWhileInsideMake) {
  std::atomic<bool> inside{false}, release{false}, finished{false}, destroyed{false};
  auto p = std::make_unique<Prefetcher<int>>(
      [&](uint64_t k) {
        if (k == 1) {
          inside = true;
          while (!release) std::this_thread::yield();
          finished = true;
        }
        return int(k);
      },
      4);
  EXPECT_EQ(p->next(), 0);
  ASSERT_TRUE(eventually([&] { return inside.load(); }));
  std::thread destroyer([&] {
    p.reset();
    destroyed = true;
  });
  // The destructor waits for the make() in progress: it cannot have returned yet.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(destroyed.load());
  release = true;
  destroyer.join();
  EXPECT_TRUE(finished.load());
  EXPECT_TRUE(destroyed.load());
}

TEST(Prefetcher, DepthMustBePositive) {
  EXPECT_EQ(error_of([] { Prefetcher<int>([](uint64_t) { return 0; }, 0); }),
            "[prefetch] the queue depth must be at least 1, got 0");
}
