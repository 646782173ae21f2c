// trace::loop: loop node == unrolled loop == eager loop; n = 0; a runtime count.
#include <gtest/gtest.h>

#include "core/engine.h"
#include "core/rng.h"
#include "ops/ops.h"
#include "trace/trace.h"
#include "trace_support.h"
#include "error_of.h"

namespace tide {
namespace {

using testing::bitwise_equal;
using test_util::error_of;

Tensor step(const Tensor& x) { return tanh(x * 0.9 + 0.05); }

TEST(TraceLoop, LoopNodeEqualsUnrolledAndEager) {
  Tensor x = randn({17});
  Tensor eager = x;
  for (int i = 0; i < 25; ++i) eager = step(eager);
  auto unrolled = trace::function([](const Tensor& x) {
    Tensor y = x;
    for (int i = 0; i < 25; ++i) y = step(y);
    return y;
  });
  auto node = trace::function([](const Tensor& x) { return trace::loop(25, step, x); });
  EXPECT_TRUE(bitwise_equal(unrolled(x), eager));
  EXPECT_TRUE(bitwise_equal(node(x), eager));
  EXPECT_TRUE(bitwise_equal(trace::loop(25, step, x), eager));  // eager trace::loop
  EXPECT_EQ(node.stats().recorded_ops, 1);
  EXPECT_EQ(unrolled.stats().recorded_ops, 75);
}

TEST(TraceLoop, FusedBodyAndRuntimeCount) {
  auto f = trace::function([](const Tensor& x, const Tensor& n) { return trace::loop(n, step, x); },
                           {.fusion = trace::Fusion::elementwise});
  Tensor x = randn({9});
  for (int64_t n : {0, 1, 7, 30}) {
    Tensor eager = x;
    for (int64_t i = 0; i < n; ++i) eager = step(eager);
    Tensor got = f(x, from_vector<int64_t>({n}, {1}));
    EXPECT_TRUE(bitwise_equal(got, eager)) << n;
  }
  EXPECT_EQ(f.stats().traces, 1);  // the count is a value, not part of the signature
}

TEST(TraceLoop, ZeroIterationsReturnTheInputState) {
  Tensor x = randn({4});
  auto f = trace::function([](const Tensor& x) { return trace::loop(0, step, x); });
  Tensor y = f(x);
  EXPECT_TRUE(bitwise_equal(y, x));
  EXPECT_NE(y.storage(), x.storage());
  Tensor e = trace::loop(0, step, x);
  EXPECT_TRUE(bitwise_equal(e, x));
  EXPECT_NE(e.storage(), x.storage());
}

TEST(TraceLoop, SeveralStateTensorsAndCapturedValues) {
  Tensor w = full({3}, 0.5);
  auto body = [&](const std::vector<Tensor>& s) {
    return std::vector<Tensor>{s[0] + s[1] * w, s[1] * 0.9, s[0]};  // s[0] passes through
  };
  std::vector<Tensor> init{ones({3}), full({3}, 2.0), zeros({3})};
  std::vector<Tensor> eager = init;
  for (int i = 0; i < 6; ++i) eager = body(eager);
  auto f = trace::function([&](const Tensor& a, const Tensor& b, const Tensor& c) {
    Tensor scale = a * 1.0;  // an intermediate of the outer graph the body reads
    auto out = trace::loop(6, [&](const std::vector<Tensor>& s) {
      return std::vector<Tensor>{s[0] + s[1] * w * scale / scale, s[1] * 0.9, s[0]};
    }, {a, b, c});
    return out;
  });
  std::vector<Tensor> got = f(init[0], init[1], init[2]);
  ASSERT_EQ(got.size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    std::vector<double> g = got[j].to_vector<double>(), e = eager[j].to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-6) << j << "," << i;
  }
}

// Random ops in a traced loop body draw, iteration by iteration, what the eager loop draws,
// and new numbers on every replay.
TEST(TraceLoop, RandomOpsInTheBodyMatchEagerAndAdvance) {
  auto body = [](const std::vector<Tensor>& s) {
    return std::vector<Tensor>{s[0] * 0.5 + randn({3}), s[1] + rand({2, 2})};
  };
  auto run = [&](const Tensor& a, const Tensor& b) {
    Tensor pre = randn({4});  // random ops before and after the loop keep their order
    std::vector<Tensor> out = trace::loop(5, body, {a + pre.slice(0, 3), b});
    return std::vector<Tensor>{out[0], out[1], randn({2})};
  };
  auto f = trace::function(run);
  Tensor a = zeros({3}), b = zeros({2, 2});
  manual_seed(9);
  std::vector<Tensor> t1 = f(a, b), t2 = f(a, b);
  manual_seed(9);
  std::vector<Tensor> e1 = run(a, b), e2 = run(a, b);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(bitwise_equal(t1[i], e1[i])) << i;
    EXPECT_TRUE(bitwise_equal(t2[i], e2[i])) << i;
    EXPECT_FALSE(bitwise_equal(t1[i], t2[i])) << i;
  }
}

TEST(TraceLoop, ErrorsAreClear) {
  Tensor x = ones({2});
  EXPECT_NE(error_of([&] { trace::loop(-1, step, x); }).find("[loop] count must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { trace::loop(2, [](const Tensor& t) { return sum(t); }, x); })
                .find("but the body returned"),
            std::string::npos);
  EXPECT_NE(error_of([&] { trace::loop(ones({2}), step, x); }).find("one-element"),
            std::string::npos);
  auto f = trace::function([](const Tensor& x, const Tensor& n) {
    return trace::loop(n, [](const Tensor& t) { return t + randn({2}); }, x);
  });
  EXPECT_NE(error_of([&] { f(x, from_vector<int64_t>({3}, {1})); })
                .find("random ops inside a traced trace::loop body need an int count"),
            std::string::npos);
  // A negative runtime count fails the replay at sync.
  auto g = trace::function([](const Tensor& x, const Tensor& n) { return trace::loop(n, step, x); });
  Tensor bad = g(x, from_vector<int64_t>({-3}, {1}));
  EXPECT_NE(error_of([&] { bad.wait_to_read(); }).find("loop count must be >= 0"),
            std::string::npos);
  try { wait_all(); } catch (const Error&) {}
}

}  // namespace
}  // namespace tide
