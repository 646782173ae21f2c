#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "core/error.h"
#include "train/progress.h"

namespace tide::train {
namespace {

TEST(ProgressTest, ForcedOnShowsLabelCountsAndEndsWithNewline) {
  std::ostringstream out;
  {
    ProgressBar bar("epoch 1", 100, out, true);
    EXPECT_TRUE(bar.enabled());
    bar.update(42);  // the first update draws at once
    std::string s = out.str();
    EXPECT_EQ(s.rfind("\repoch 1 [", 0), 0u) << s;
    EXPECT_NE(s.find("42/100"), std::string::npos) << s;
    EXPECT_NE(s.find(std::string(12, '#') + std::string(18, '.') + "]"), std::string::npos) << s;
    EXPECT_NE(s.find("eta"), std::string::npos) << s;
    EXPECT_EQ(s.find('\n'), std::string::npos);
    bar.finish();
    s = out.str();
    ASSERT_FALSE(s.empty());
    EXPECT_EQ(s.back(), '\n');
    EXPECT_EQ(s.find('\n'), s.size() - 1);  // a single line
    bar.finish();                           // idempotent
    bar.update(50);                         // ignored once finished
    EXPECT_EQ(out.str(), s);
  }
  EXPECT_EQ(out.str().back(), '\n');
  EXPECT_EQ(out.str().find('\n'), out.str().size() - 1);  // destructor added nothing
}

TEST(ProgressTest, DestructorFinishesTheLine) {
  std::ostringstream out;
  {
    ProgressBar bar("x", 10, out, true);
    bar.update(3);
  }
  std::string s = out.str();
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.back(), '\n');
}

TEST(ProgressTest, DisabledWritesNothing) {
  std::ostringstream out;
  {
    ProgressBar bar("quiet", 10, out, false);
    EXPECT_FALSE(bar.enabled());
    for (int i = 0; i <= 10; ++i) bar.update(i);
    bar.finish();
  }
  EXPECT_TRUE(out.str().empty());
}

TEST(ProgressTest, UpdateBeyondTotalClamps) {
  std::ostringstream out;
  ProgressBar bar("c", 100, out, true);
  bar.update(150);
  bar.update(-5);
  bar.update(250);
  bar.finish();
  std::string s = out.str();
  EXPECT_NE(s.find("100/100"), std::string::npos) << s;
  EXPECT_NE(s.find("[" + std::string(30, '#') + "]"), std::string::npos) << s;
  EXPECT_EQ(s.find("150"), std::string::npos) << s;
  EXPECT_EQ(s.find("250"), std::string::npos) << s;
  EXPECT_EQ(s.find('-'), std::string::npos) << s;
}

TEST(ProgressTest, RedrawsAreRateLimitedButFullIsAlwaysDrawn) {
  std::ostringstream out;
  ProgressBar bar("r", 1000, out, true);
  for (int i = 1; i <= 1000; ++i) bar.update(i);  // far faster than 10 redraws/s
  bar.finish();
  std::string s = out.str();
  size_t redraws = 0;
  for (char c : s) redraws += c == '\r';
  EXPECT_LE(redraws, 5u) << s;  // first, full, finish (+ slack for a slow machine)
  EXPECT_NE(s.find("1000/1000"), std::string::npos) << s;
}

TEST(ProgressTest, ShorterLineBlanksThePrevious) {
  std::ostringstream out;
  ProgressBar bar("b", 10, out, true);
  bar.update(1);  // has an eta
  bar.update(10); // full: no eta, shorter text padded with spaces
  std::string s = out.str();
  size_t second = s.rfind('\r');
  ASSERT_NE(second, 0u);
  EXPECT_EQ(s.size() - second, second);  // both redraws are the same width
}

TEST(ProgressTest, NegativeTotalThrows) {
  std::ostringstream out;
  EXPECT_THROW(ProgressBar("n", -1, out, true), tide::Error);
}

TEST(ProgressTest, DefaultConstructorFollowsStderrTty) {
  ProgressBar bar("tty", 5);
  EXPECT_EQ(bar.enabled(), isatty(fileno(stderr)) != 0);
}

}  // namespace
}  // namespace tide::train
