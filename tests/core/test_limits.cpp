// 64-bit boundaries: element and byte counts are checked, never
// wrapped. Shapes hold at most 2^60 elements; the allocator hands out at most 2^62 bytes;
// requests beyond either give tide::Error at the call, with nothing allocated or queued.
#include <gtest/gtest.h>

#include "tests/core/test_support.h"

namespace tide {
namespace {

using namespace testing_support;

constexpr int64_t P(int k) { return int64_t(1) << k; }

TEST(Limits, ShapesUpTo2To60ElementsAndNoMore) {
  EXPECT_EQ(Shape({P(31), P(29)}).numel(), P(60));
  EXPECT_EQ(Shape({P(30), P(30)}).numel(), P(60));
  EXPECT_TRUE(contains(error_of([] { Shape s{P(60) + 1}; }), "more than 2^60 elements"));
  EXPECT_TRUE(contains(error_of([] { Shape s{P(31), P(31)}; }), "[shape]"));  // 2^62
  EXPECT_TRUE(contains(error_of([] { Shape s{P(32), P(32)}; }), "[shape]"));  // 2^64: wraps to 0
  EXPECT_TRUE(contains(error_of([] { Shape s{P(21), P(21), P(22)}; }), "[shape]"));  // 2^64
  EXPECT_TRUE(contains(error_of([] { Shape s{P(62), 3}; }), "[shape]"));  // wraps to 2^62*3
  EXPECT_EQ(Shape({0, P(62), P(62)}).numel(), 0) << "a zero extent: empty, whatever the rest";
  Shape grow{P(40)};
  EXPECT_TRUE(contains(error_of([&] { grow.push_back(P(30)); }), "[shape]"));
  EXPECT_EQ(grow.ndim(), 1) << "unchanged when refused";
}

TEST(Limits, HugeTensorsAreRefusedAtTheCall) {
  uint64_t queued = Engine::get().stats().queued;
  // Once a 64-byte block with a fill writing past it (numel * 4 wrapped to 0).
  EXPECT_TRUE(contains(error_of([] { (void)zeros({P(62)}); }), "[shape]"));
  EXPECT_TRUE(contains(error_of([] { (void)zeros({P(21), P(21), P(22)}); }), "[shape]"));
  // Once accepted (4 * (2^62 + 1) wrapped to 4), then a reduction read past the block.
  EXPECT_TRUE(contains(error_of([] { (void)ones({4}).reshape({P(62) + 1, 4}); }), "[reshape]"));
  EXPECT_TRUE(contains(error_of([] { (void)ones({4}).reshape({-1, P(62)}); }), "reshape"));
  EXPECT_EQ(Engine::get().stats().queued, queued + 2) << "only the two ones({4}) fills ran";
}

TEST(Limits, TheAllocatorRefusesWhatItCannotRoundAndWhatTheSystemLacks) {
  Allocator& al = Allocator::get();
  Engine::get().synchronize();  // earlier tests' storages are released
  const size_t active = al.stats().active_bytes;
  // Size classes of such requests once wrapped to a 0-byte block.
  for (size_t bytes : {size_t(1) << 63, ~size_t(0), (size_t(1) << 62) + 1})
    EXPECT_TRUE(contains(error_of([&] { (void)al.allocate(bytes, "huge"); }),
                         "[huge] out of memory on cpu"))
        << bytes;
  // 2^60 bytes: a valid size the system does not have. A tide::Error, not std::bad_alloc.
  std::string e = error_of([&] { (void)al.allocate(size_t(1) << 60, "big"); });
  EXPECT_TRUE(contains(e, "[big] out of memory on cpu"));
  EXPECT_TRUE(contains(e, "the system has no more memory"));
  EXPECT_EQ(al.stats().active_bytes, active);
  EXPECT_TRUE(contains(error_of([&] { (void)al.workspace(~size_t(0), "ws"); }), "[ws]"));
}

}  // namespace
}  // namespace tide
