// CollectiveWatchdog (dist/watchdog.h), the NCCL backend's timeout, on an explicit clock:
// nothing fires while collectives complete or are within their deadline; the oldest late
// one fires once, naming itself, the rank and the limit, and stays fired; TIDE_NCCL_TIMEOUT
// is read and checked. (The backend's thread and host functions need a GPU and NCCL.)
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "dist/watchdog.h"
#include "tests/error_of.h"

namespace tide::dist {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(CollectiveWatchdog, FiresOnceForTheOldestLateCollective) {
  CollectiveWatchdog w(3, seconds(2));
  const auto t0 = CollectiveWatchdog::Clock::time_point{} + seconds(100);
  const uint64_t a = w.queued("all_reduce", t0);
  const uint64_t b = w.queued("broadcast", t0 + seconds(1));
  EXPECT_EQ(w.check(t0 + seconds(2)), "") << "a is at its deadline, not past it";
  w.done(a);
  EXPECT_EQ(w.pending(), 1u);
  EXPECT_EQ(w.check(t0 + milliseconds(2500)), "") << "a completed; b is within its 2 s";
  const std::string why = w.check(t0 + milliseconds(3100));
  EXPECT_NE(why.find("the collective broadcast queued on rank 3"), std::string::npos) << why;
  EXPECT_NE(why.find("did not complete within 2.0 s (waited 2.1 s"), std::string::npos) << why;
  EXPECT_NE(why.find("TIDE_NCCL_TIMEOUT"), std::string::npos) << why;
  EXPECT_NE(why.find("aborted"), std::string::npos) << why;
  EXPECT_TRUE(w.fired());
  w.done(b);  // too late: it stays fired
  EXPECT_EQ(w.check(t0 + seconds(4)), why);
  EXPECT_EQ(w.pending(), 0u);
}

TEST(CollectiveWatchdog, CompletedCollectivesAndTimeoutZeroNeverFire) {
  CollectiveWatchdog w(0, seconds(1));
  const auto t0 = CollectiveWatchdog::Clock::time_point{};
  for (int i = 0; i < 100; ++i) w.done(w.queued("all_reduce", t0 + seconds(i)));
  w.done(12345);  // unknown: ignored
  EXPECT_EQ(w.check(t0 + seconds(1000)), "");
  EXPECT_FALSE(w.fired());
  CollectiveWatchdog off(0, seconds(0));
  off.queued("all_reduce", t0);
  EXPECT_EQ(off.check(t0 + seconds(100000)), "");
}

TEST(CollectiveWatchdog, ReadsItsLimitFromTheEnvironment) {
  ::unsetenv("TIDE_NCCL_TIMEOUT");
  EXPECT_EQ(CollectiveWatchdog::timeout_from_env(), seconds(600));
  ::setenv("TIDE_NCCL_TIMEOUT", "30", 1);
  EXPECT_EQ(CollectiveWatchdog::timeout_from_env(), seconds(30));
  ::setenv("TIDE_NCCL_TIMEOUT", "0", 1);
  EXPECT_EQ(CollectiveWatchdog::timeout_from_env(), seconds(0));
  for (const char* bad : {"", "-1", "1.5", "ten", "86401"}) {
    ::setenv("TIDE_NCCL_TIMEOUT", bad, 1);
    EXPECT_TIDE_ERROR(CollectiveWatchdog::timeout_from_env(), "[dist]", "TIDE_NCCL_TIMEOUT",
                      "whole seconds");
  }
  ::unsetenv("TIDE_NCCL_TIMEOUT");
}

}  // namespace
}  // namespace tide::dist
