// Host data made inside a traced function (from_vector / from_data fill their storage on
// the caller's thread, with no op) and then written in place by a node: every replay must
// start from the host values again, as every eager call does.
#include <gtest/gtest.h>

#include <vector>

#include "ops/ops.h"
#include "trace/trace.h"
#include "trace_support.h"

namespace tide {
namespace {

using testing::bitwise_equal;

std::vector<trace::Options> variants() {
  return {trace::Options{.name = "plain"},
          trace::Options{.name = "fused", .fusion = trace::Fusion::elementwise},
          trace::Options{.name = "streams", .streams = 2},
          trace::Options{.name = "verify", .verify = true}};
}

// The intermediate case: c is read, then written in place, and not returned.
Tensor read_then_mul(const Tensor& x) {
  Tensor c = from_vector(std::vector<float>{1, 2, 3}, Shape{3});
  Tensor y = x + c;
  c.mul_(2.0);
  return y;
}

// The output case: c is written in place and returned.
Tensor add_into_host_data(const Tensor& x) {
  Tensor c = from_vector(std::vector<float>{1, 2, 3}, Shape{3});
  c.add_(x);
  return c;
}

// A partial first write: rows the node does not write keep their host values.
Tensor partial_overwrite(const Tensor& x) {
  Tensor c = from_data({1, 2, 3, 4, 5, 6}, Shape{3, 2}, DType::float32);
  c.slice(0, 1).copy_(x.slice(0, 1));
  return c * 1.0 + x;
}

// Empty host data written in place: nothing to copy (UBSan caught a memcpy from a null
// pointer when the copy node was made for it).
Tensor add_into_empty_host_data(const Tensor& x) {
  Tensor c = from_vector(std::vector<float>{}, Shape{0});
  c.add_(x);
  return c;
}

void check(Tensor (*body)(const Tensor&), const Shape& shape) {
  for (const trace::Options& o : variants()) {
    auto f = trace::function(body, o);
    for (int call = 0; call < 4; ++call) {
      Tensor x = full(shape, double(call) + 0.5);
      EXPECT_TRUE(bitwise_equal(f(x), body(x))) << o.name << ", call " << call;
    }
    EXPECT_EQ(f.stats().traces, 1) << o.name;
  }
}

TEST(TraceHostData, ReadThenWrittenInPlaceEqualsEager) { check(read_then_mul, Shape{3}); }

TEST(TraceHostData, WrittenInPlaceAndReturnedEqualsEager) { check(add_into_host_data, Shape{3}); }

TEST(TraceHostData, EmptyHostDataWrittenInPlace) { check(add_into_empty_host_data, Shape{0}); }

TEST(TraceHostData, PartialFirstWriteKeepsTheOtherHostValues) {
  check(partial_overwrite, Shape{3, 2});
}

TEST(TraceHostData, BriefExamples) {
  auto h = trace::function(read_then_mul);
  for (int call = 0; call < 3; ++call)
    EXPECT_EQ(h(zeros({3})).to_vector<float>(), (std::vector<float>{1, 2, 3})) << call;
  auto g = trace::function(add_into_host_data);
  for (int call = 0; call < 3; ++call)
    EXPECT_EQ(g(ones({3})).to_vector<float>(), (std::vector<float>{2, 3, 4})) << call;
}

}  // namespace
}  // namespace tide
