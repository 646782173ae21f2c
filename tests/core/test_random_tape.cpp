// RandomTape (core/random_tape.h): a replay draws the recorded numbers and leaves the
// generator alone; nested tapes; a trace's counter slot handed back; the replay's errors.
#include <gtest/gtest.h>

#include <vector>

#include "core/random_tape.h"
#include "error_of.h"
#include "tide.h"

namespace tide::detail {
namespace {

TEST(RandomTape, ReplayDrawsTheRecordedNumbersWithoutTouchingTheGenerator) {
  Generator gen(4);
  std::vector<RandomDraw> draws;
  std::vector<float> a, b;
  {
    RandomTape tape(draws, RandomTape::Mode::record, "test");
    a = rand({10}, DType::float32, gen).to_vector<float>();
    b = randn({3}, DType::float32, gen).to_vector<float>();
  }
  ASSERT_EQ(draws.size(), 2u);
  EXPECT_EQ(draws[0].numel, 10u);
  EXPECT_EQ(draws[1].eager.offset, 3u) << "10 elements take 3 Philox blocks";
  const uint64_t after = gen.offset();
  // Something else draws in between: the replay does not see it.
  std::vector<float> other = rand({10}, DType::float32, gen).to_vector<float>();
  EXPECT_NE(other, a);
  const uint64_t before_replay = gen.offset();
  {
    RandomTape tape(draws, RandomTape::Mode::replay, "test");
    EXPECT_EQ(rand({10}, DType::float32, gen).to_vector<float>(), a);
    EXPECT_EQ(randn({3}, DType::float32, gen).to_vector<float>(), b);
    tape.check_spent();
  }
  EXPECT_EQ(gen.offset(), before_replay);
  EXPECT_GT(before_replay, after);
}

TEST(RandomTape, ARecordingTapeInsideAReplayTakesTheReplayedDraws) {
  Generator gen(1);
  std::vector<RandomDraw> outer, inner, inner_again;
  std::vector<float> first;
  {
    RandomTape o(outer, RandomTape::Mode::record, "outer");
    RandomTape i(inner, RandomTape::Mode::record, "inner");
    first = rand({8}, DType::float32, gen).to_vector<float>();
  }
  ASSERT_EQ(outer.size(), 1u);
  ASSERT_EQ(inner.size(), 1u);
  {
    RandomTape o(outer, RandomTape::Mode::replay, "outer");
    RandomTape i(inner_again, RandomTape::Mode::record, "inner");
    EXPECT_EQ(rand({8}, DType::float32, gen).to_vector<float>(), first);
  }
  ASSERT_EQ(inner_again.size(), 1u);
  EXPECT_EQ(inner_again[0].eager.offset, inner[0].eager.offset);
  EXPECT_EQ(inner_again[0].eager.key, inner[0].eager.key);
}

TEST(RandomTape, ATracedDrawGetsItsSlotBack) {
  Generator gen(2);
  std::vector<RandomDraw> draws;
  uint64_t slot[2] = {0, 0};
  int made = 0;
  auto fresh = [&] {
    ++made;
    return static_cast<const uint64_t*>(slot);
  };
  const int sink = 0, other_sink = 0;
  {
    RandomTape tape(draws, RandomTape::Mode::record, "test");
    EXPECT_EQ(tape.traced(gen, 16, &sink, fresh), slot);
  }
  {
    RandomTape tape(draws, RandomTape::Mode::replay, "test");
    EXPECT_EQ(tape.traced(gen, 16, &sink, fresh), slot);
  }
  EXPECT_EQ(made, 1);
  RandomTape tape(draws, RandomTape::Mode::replay, "test");
  EXPECT_TIDE_ERROR(tape.traced(gen, 16, &other_sink, fresh), "[test]",
                    "recorded by another trace");
}

TEST(RandomTape, ReplayErrors) {
  Generator gen(3), other(3);
  std::vector<RandomDraw> draws;
  {
    RandomTape tape(draws, RandomTape::Mode::record, "test");
    rand({5}, DType::float32, gen);
  }
  {
    RandomTape tape(draws, RandomTape::Mode::replay, "test");
    EXPECT_TIDE_ERROR(rand({6}, DType::float32, gen), "[test]", "random draw #1", "6 elements",
                      "5 elements");
  }
  {
    RandomTape tape(draws, RandomTape::Mode::replay, "test");
    EXPECT_TIDE_ERROR(rand({5}, DType::float32, other), "[test]", "another generator");
  }
  {
    RandomTape tape(draws, RandomTape::Mode::replay, "test");
    rand({5}, DType::float32, gen);
    EXPECT_TIDE_ERROR(rand({5}, DType::float32, gen), "[test]", "random draw #2",
                      "the first run made 1");
  }
  RandomTape tape(draws, RandomTape::Mode::replay, "test");
  EXPECT_TIDE_ERROR(tape.check_spent(), "[test]", "made 0 random draws", "first run made 1");
}

}  // namespace
}  // namespace tide::detail
