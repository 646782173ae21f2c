#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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
  bar.update(1);   // has an eta
  bar.update(10);  // full: no eta, shorter text padded with spaces
  std::string s = out.str();
  size_t second = s.rfind('\r');
  ASSERT_NE(second, 0u);
  EXPECT_EQ(s.size() - second, second);  // both redraws are the same width
}

TEST(ProgressTest, StatusTextFollowsTheCountsAndRedrawsWithoutANewCount) {
  std::ostringstream out;
  ProgressBar bar("s", 10, out, true);
  bar.update(2);  // first draw: no status yet
  std::string s = out.str();
  EXPECT_EQ(s.find("loss"), std::string::npos) << s;
  bar.set_status("loss 0.4213");
  EXPECT_EQ(out.str(), s);  // drawn at the next update, not at once
  // Same count, new status: redrawn once the rate limit allows (the full bar skips it, so
  // wait it out instead of racing the clock).
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  bar.update(2);
  s = out.str();
  size_t last = s.rfind('\r');
  ASSERT_NE(last, 0u) << s;  // a second draw
  std::string line = s.substr(last + 1);
  EXPECT_NE(line.find("2/10"), std::string::npos) << line;
  size_t eta = line.find("eta"), status = line.find(" loss 0.4213");
  ASSERT_NE(status, std::string::npos) << line;
  EXPECT_LT(eta, status) << line;  // after the counts, time and eta
  // An unchanged count and status do not redraw.
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  bar.update(2);
  EXPECT_EQ(out.str(), s);
  // The full bar keeps the status; clearing it blanks the old text.
  bar.update(10);
  bar.set_status("");
  bar.finish();
  s = out.str();
  std::vector<std::string> lines;
  for (size_t p = s.find('\r'); p != std::string::npos;) {
    size_t q = s.find_first_of("\r\n", p + 1);
    lines.push_back(s.substr(p + 1, q - p - 1));
    p = q == std::string::npos || s[q] == '\n' ? std::string::npos : q;
  }
  ASSERT_EQ(lines.size(), 4u) << s;
  EXPECT_NE(lines[2].find("10/10"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("loss 0.4213"), std::string::npos) << lines[2];
  EXPECT_EQ(lines[3].find("loss"), std::string::npos) << lines[3];
  // Padded with spaces over what the longer previous line showed.
  EXPECT_GE(lines[3].size(), lines[2].find_last_not_of(' ') + 1) << s;
  EXPECT_EQ(s.back(), '\n');
}

TEST(ProgressTest, StatusIsIgnoredWhenDisabledOrFinished) {
  std::ostringstream quiet;
  {
    ProgressBar bar("q", 3, quiet, false);
    bar.set_status("loss 1");
    bar.update(3);
  }
  EXPECT_TRUE(quiet.str().empty());
  std::ostringstream out;
  ProgressBar bar("f", 3, out, true);
  bar.update(3);
  bar.finish();
  std::string s = out.str();
  bar.set_status("loss 1");
  bar.update(3);
  bar.finish();
  EXPECT_EQ(out.str(), s);
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
