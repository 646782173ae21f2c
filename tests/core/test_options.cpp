// TIDE_ARG and TIDE_ARG_AS (core/options.h): the member takes its default, the setter sets it
// and returns the struct itself, so calls chain; a moved-in string arrives whole.
#include <gtest/gtest.h>

#include <string>
#include <type_traits>

#include "core/options.h"

namespace {

struct Options {
  TIDE_ARG(int, size) = 4;
  TIDE_ARG(std::string, name) = "default";
  TIDE_ARG_AS(bool, bias, with_bias) = true;
};

TEST(Options, SettersChainAndKeepTheDefaultsOfTheOthers) {
  static_assert(std::is_same_v<decltype(Options().size(1)), Options&>);
  Options o;
  EXPECT_EQ(o.size_, 4);
  EXPECT_EQ(o.name_, "default");
  EXPECT_TRUE(o.with_bias);
  Options& r = o.size(7).bias(false);
  EXPECT_EQ(&r, &o);
  EXPECT_EQ(o.size_, 7);
  EXPECT_FALSE(o.with_bias);
  EXPECT_EQ(o.name_, "default");
  EXPECT_EQ(Options().name(std::string(40, 'x')).name_, std::string(40, 'x'));
}

}  // namespace
