// trace::loop: loop node == unrolled loop == eager loop; n = 0; a runtime count.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/engine/engine.h"
#include "core/rng.h"
#include "error_of.h"
#include "ops/ops.h"
#include "trace/trace.h"
#include "trace_support.h"

namespace tide {
namespace {

using test_util::error_of;
using testing::bitwise_equal;

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

// Fused one-op bodies run every iteration of a block in registers (the op's iterate
// function): still eager's bits, for scalar, tensor, one-element and unary operands, and
// when the other operand is the state itself (which must not be read once and kept).
TEST(TraceLoop, OneOpBodiesIterateInRegistersBitwise) {
  for (DType dt : {DType::float32, DType::float64}) {
    for (int64_t size : {5, 37, 300}) {
      Tensor c = randn({size}, dt) * 0.01, one = full({1}, 0.75, dt);
      std::vector<std::function<Tensor(const Tensor&)>> bodies{
          [](const Tensor& y) { return y + 1.0; },  [&](const Tensor& y) { return y * (c + 1.0); },
          [&](const Tensor& y) { return y - one; }, [](const Tensor& y) { return tanh(y); },
          [](const Tensor& y) { return y + y; },
      };
      for (size_t k = 0; k < bodies.size(); ++k) {
        auto f = trace::function(
            [&](const Tensor& x, const Tensor& n) { return trace::loop(n, bodies[k], x); },
            {.fusion = trace::Fusion::elementwise});
        Tensor x = randn({size}, dt) * 0.5;
        for (int64_t n : {0, 1, 50}) {
          Tensor eager = x;
          for (int64_t i = 0; i < n; ++i) eager = bodies[k](eager);
          EXPECT_TRUE(bitwise_equal(f(x, from_vector<int64_t>({n}, {1})), eager))
              << name(dt) << ", size " << size << ", body " << k << ", n " << n;
        }
      }
    }
  }
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

// The body gets its state by value: one that writes the state in place (and returns it)
// never writes the caller's tensor, eagerly as traced (where the state lives in the
// loop's own buffers). The eager loop wrote the caller's tensor on iteration 0 (found by
// the random API driver).
TEST(TraceLoop, ABodyWritingItsStateInPlaceLeavesTheCallersTensor) {
  auto body = [](const Tensor& s) {
    Tensor t = s;  // the same tensor
    t.mul_(2.0);
    return t + 1.0;
  };
  auto f_int = trace::function([&](const Tensor& x) { return trace::loop(3, body, x); });
  auto f_tensor =
      trace::function([&](const Tensor& x, const Tensor& n) { return trace::loop(n, body, x); });
  const std::vector<float> start{1, -2, 0.5f};
  const std::vector<float> want{15, -9, 11};  // s -> 2 s + 1, three times
  for (int call = 0; call < 2; ++call) {
    Tensor x = from_vector(start, Shape{3});
    EXPECT_EQ(trace::loop(3, body, x).to_vector<float>(), want);
    EXPECT_EQ(trace::loop(from_vector<int64_t>({3}, Shape{1}), body, x).to_vector<float>(), want);
    EXPECT_EQ(f_int(x).to_vector<float>(), want);
    EXPECT_EQ(f_tensor(x, from_vector<int64_t>({3}, Shape{1})).to_vector<float>(), want);
    EXPECT_EQ(x.to_vector<float>(), start) << "call " << call;
  }
}

// Empty state tensors (no memory: a null data pointer) are carried like the others, traced
// and fused or not, and empty host data made in the function is fine too. UBSan stopped the
// process here (memcpy of zero bytes from a null pointer); found by the random API driver.
TEST(TraceLoop, EmptyStatesAndEmptyHostData) {
  auto body = [](const std::vector<Tensor>& s) {
    return std::vector<Tensor>{s[0] + 1.0, s[1] * 2.0};
  };
  for (trace::Fusion fusion : {trace::Fusion::none, trace::Fusion::elementwise}) {
    auto f = trace::function(
        [&](const Tensor& a, const Tensor& b, const Tensor& n) {
          std::vector<Tensor> r = trace::loop(n, body, {a, b});
          Tensor e = from_data({}, Shape{0}, DType::float32);
          return std::vector<Tensor>{r[0], r[1], e + 1.0};
        },
        {.fusion = fusion});
    Tensor a = zeros({0, 3}), b = full({2}, 1.5);
    for (int64_t n : {0, 3}) {
      std::vector<Tensor> got = f(a, b, from_vector<int64_t>({n}, Shape{1}));
      ASSERT_EQ(got.size(), 3u);
      EXPECT_EQ(got[0].shape(), Shape({0, 3}));
      EXPECT_EQ(got[1].to_vector<float>(), std::vector<float>(2, n == 0 ? 1.5f : 12.0f));
      EXPECT_EQ(got[2].numel(), 0);
    }
    for (int64_t n : {0, 2}) {
      Tensor one_empty = trace::function(
          [&](const Tensor& a) {
            return trace::loop(
                n, [](const Tensor& s) { return s * 3.0; }, a);
          },
          {.fusion = fusion})(a);
      EXPECT_EQ(one_empty.shape(), Shape({0, 3}));
      Tensor inner = trace::function(
          [&](const Tensor& a) {
            return trace::loop(
                       n, [](const Tensor& s) { return s * 3.0; }, a * 2.0) -
                   1.0;
          },
          {.fusion = fusion})(from_data({}, Shape{0}, DType::float64));
      EXPECT_EQ(inner.shape(), Shape({0}));
    }
  }
}

// A traced loop's body is recorded once, so no gradient flows back through the loop node.
// A backward() that reaches a state computed from tensors that require grad is refused
// before it queues anything, naming the loop; it silently left the loop's share out of
// w's gradient (1 instead of eager's 4.5).
TEST(TraceLoop, BackwardThroughATracedLoopIsRefusedClearly) {
  Tensor w = full({3}, 0.5);
  w.requires_grad_();
  auto step = [&](const Tensor& x) {
    w.zero_grad();
    Tensor s = trace::loop(
        3, [&](const Tensor& s) { return s * w + 1.0; }, x);
    Tensor loss = sum(s) + sum(w);
    loss.backward();
    return w.grad();
  };
  Tensor x = full({3}, 2.0);
  EXPECT_EQ(step(x).to_vector<float>(), std::vector<float>(3, 4.5f));  // eager
  auto f = trace::function(step);
  const std::string e = error_of([&] { f(x); });
  EXPECT_NE(e.find("[backward] no gradient flows through the trace::loop at"), std::string::npos)
      << e;
  EXPECT_NE(e.find("call backward() inside the loop body"), std::string::npos) << e;
  // The same through what the body's placeholders cannot show: an initial state that
  // requires grad, and a state that needs grad only after another state passed it on.
  auto from_initial = trace::function([&](const Tensor& x) {
    w.zero_grad();
    Tensor s = trace::loop(
        3, [](const Tensor& s) { return s * 2.0; }, x * w);
    (sum(s) + sum(w)).backward();
  });
  EXPECT_NE(error_of([&] { from_initial(x); }).find("no gradient flows"), std::string::npos);
  auto passed_on = trace::function([&](const Tensor& x) {
    w.zero_grad();
    std::vector<Tensor> r = trace::loop(2,
                                        [&](const std::vector<Tensor>& s) {
                                          return std::vector<Tensor>{s[0] * w, s[0] * 1.0};
                                        },
                                        {x, x});
    (sum(r[1]) + sum(w)).backward();
  });
  EXPECT_NE(error_of([&] { passed_on(x); }).find("whose state 1 depends"), std::string::npos);
  // An int count of 0 returns copies of the initial state, which need no gradient here:
  // nothing to refuse, and the gradient equals eager's.
  auto none = [&](const Tensor& x) {
    w.zero_grad();
    Tensor r = trace::loop(
        0, [&](const Tensor& s) { return s * w; }, x);
    sum(r * w).backward();
    return w.grad();
  };
  EXPECT_EQ(trace::function(none)(x).to_vector<float>(), none(x).to_vector<float>());
  // A loop whose state needs no gradient, beside the same backward, is fine.
  auto g = trace::function([&](const Tensor& x) {
    w.zero_grad();
    Tensor s = trace::loop(
        3, [&](const Tensor& s) { return s * 0.5 + 1.0; }, x);
    (sum(s * w)).backward();
    return w.grad();
  });
  EXPECT_EQ(g(x).to_vector<float>(), std::vector<float>(3, 2.0f));  // s: 2 -> 2 -> 2 -> 2
}

// Training steps inside a loop body (zero_grad, backward, an update of the parameter) are
// recorded with the body and replayed per iteration: the same parameters, losses and
// .grad as the eager loop, call after call.
TEST(TraceLoop, TrainingStepsInsideALoopBodyEqualEager) {
  Tensor we = full({3}, 0.5), wt = full({3}, 0.5);
  we.requires_grad_();
  wt.requires_grad_();
  auto eager = testing::sgd_steps_in_a_loop(we);
  auto f = trace::function(testing::sgd_steps_in_a_loop(wt));
  Tensor x = from_vector<float>({1, 2, 3}, Shape{3});
  for (int call = 0; call < 3; ++call) {
    EXPECT_TRUE(bitwise_equal(f(x), eager(x))) << call;
    EXPECT_TRUE(bitwise_equal(wt, we)) << call;
    EXPECT_TRUE(bitwise_equal(wt.grad(), we.grad())) << call;
  }
  EXPECT_EQ(f.stats().traces, 1);
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
    auto out =
        trace::loop(6,
                    [&](const std::vector<Tensor>& s) {
                      return std::vector<Tensor>{s[0] + s[1] * w * scale / scale, s[1] * 0.9, s[0]};
                    },
                    {a, b, c});
    return out;
  });
  std::vector<Tensor> got = f(init[0], init[1], init[2]);
  ASSERT_EQ(got.size(), 3u);
  for (size_t j = 0; j < 3; ++j) {
    std::vector<double> g = got[j].to_vector<double>(), e = eager[j].to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-6) << j << "," << i;
  }
}

// A value of the function that a loop body reads is still the function's own: returned,
// it is a fresh tensor on every call (the body's graph holding it does not make it state),
// and read only by the body, it lives in the arena.
TEST(TraceLoop, AValueTheBodyReadsIsStillFreshPerCall) {
  auto body = [](const Tensor& x) {
    Tensor y = x * 2.0;
    Tensor z = x + 1.0;
    Tensor r = trace::loop(
        2,
        [&](const Tensor& s) {
          return trace::loop(
              2, [&](const Tensor& t) { return t + z; }, s + y);
        },
        x);
    return std::vector<Tensor>{y, r};
  };
  for (trace::Fusion fusion : {trace::Fusion::none, trace::Fusion::elementwise}) {
    auto f = trace::function(body, {.fusion = fusion});
    std::vector<Tensor> first = f(full({2}, 1.0));
    std::vector<Tensor> second = f(full({2}, 10.0));
    EXPECT_NE(first[0].storage(), second[0].storage()) << "outputs are fresh on every call";
    EXPECT_EQ(first[0].to_vector<float>(), std::vector<float>(2, 2.0f));
    EXPECT_EQ(first[1].to_vector<float>(), body(full({2}, 1.0))[1].to_vector<float>());
    EXPECT_EQ(second[1].to_vector<float>(), body(full({2}, 10.0))[1].to_vector<float>());
    std::shared_ptr<trace::Graph> g = f.graph(full({2}, 1.0));
    ASSERT_TRUE(g);
    for (const trace::Value& v : g->values)
      EXPECT_NE(v.kind, trace::ValueKind::state) << "nothing outlives a call";
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

// A tensor count: the body draws from a sub-stream keyed by one block the loop reserves, the
// same in eager and traced mode, whatever the count (0 included).
std::vector<Tensor> random_body(const std::vector<Tensor>& s) {
  return std::vector<Tensor>{s[0] * 0.5 + randn({3}), s[1] + rand({2, 2}, DType::float64)};
}
std::vector<Tensor> random_around_loop(const Tensor& a, const Tensor& b, const Tensor& n) {
  Tensor pre = randn({4});  // random ops before and after the loop keep their order
  std::vector<Tensor> out = trace::loop(n, random_body, {a + pre.slice(0, 3), b});
  return std::vector<Tensor>{out[0], out[1], randn({5})};
}
Tensor n_of(int64_t n) { return from_vector<int64_t>({n}, {1}); }

TEST(TraceLoop, TensorCountRandomOpsMatchEager) {
  Tensor a = zeros({3}), b = zeros({2, 2}, DType::float64);
  const std::vector<int64_t> counts{3, 5, 0, 3, 1};
  auto f = trace::function(random_around_loop);
  manual_seed(21);
  std::vector<std::vector<Tensor>> traced, eager;
  for (int64_t n : counts) traced.push_back(f(a, b, n_of(n)));
  uint64_t traced_offset = default_generator().offset();
  manual_seed(21);
  for (int64_t n : counts) eager.push_back(random_around_loop(a, b, n_of(n)));
  EXPECT_EQ(default_generator().offset(), traced_offset);
  for (size_t c = 0; c < counts.size(); ++c)
    for (size_t i = 0; i < 3; ++i)
      EXPECT_TRUE(bitwise_equal(traced[c][i], eager[c][i])) << "call " << c << ", output " << i;
  EXPECT_EQ(f.stats().traces, 1);
  // n = 0 returns the initial state (and still reserves the block: the outputs after it
  // matched above).
  std::vector<double> pre = traced[2][0].to_vector<double>();
  for (double v : pre) EXPECT_NE(v, 0.0);
  EXPECT_TRUE(bitwise_equal(traced[2][1], b));
}

// The loop advances the generator by one Philox block, whatever the count.
TEST(TraceLoop, TensorCountReservesOneBlock) {
  Tensor a = zeros({3}), b = zeros({2, 2}, DType::float64);
  auto only_loop = [](const Tensor& a, const Tensor& b, const Tensor& n) {
    return trace::loop(n, random_body, {a, b});
  };
  auto f = trace::function(only_loop);
  for (int64_t n : {4, 0, 2}) {
    uint64_t before = default_generator().offset();
    f(a, b, n_of(n));
    EXPECT_EQ(default_generator().offset() - before, 1u) << "traced, n = " << n;
    before = default_generator().offset();
    only_loop(a, b, n_of(n));
    EXPECT_EQ(default_generator().offset() - before, 1u) << "eager, n = " << n;
  }
  // A body without random ops reserves nothing.
  uint64_t before = default_generator().offset();
  trace::loop(n_of(3), step, a);
  trace::loop(n_of(0), step, a);
  EXPECT_EQ(default_generator().offset(), before);
}

TEST(TraceLoop, TensorCountRandomOpsAdvanceEachCall) {
  Tensor a = zeros({3}), b = zeros({2, 2}, DType::float64);
  auto f = trace::function(random_around_loop);
  std::vector<Tensor> t1 = f(a, b, n_of(4)), t2 = f(a, b, n_of(4));
  std::vector<Tensor> e1 = random_around_loop(a, b, n_of(4));
  std::vector<Tensor> e2 = random_around_loop(a, b, n_of(4));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_FALSE(bitwise_equal(t1[i], t2[i])) << i;
    EXPECT_FALSE(bitwise_equal(e1[i], e2[i])) << i;
  }
}

TEST(TraceLoop, TensorCountRandomOpsRepeatWithTheSeed) {
  Tensor a = zeros({3}), b = zeros({2, 2}, DType::float64);
  auto run = [&] {
    auto f = trace::function(random_around_loop);  // a fresh trace each time
    std::vector<Tensor> out;
    for (int64_t n : {2, 6}) {
      std::vector<Tensor> r = f(a, b, n_of(n));
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  };
  manual_seed(1234);
  std::vector<Tensor> r1 = run();
  manual_seed(1234);
  std::vector<Tensor> r2 = run();
  ASSERT_EQ(r1.size(), r2.size());
  for (size_t i = 0; i < r1.size(); ++i) EXPECT_TRUE(bitwise_equal(r1[i], r2[i])) << i;
}

// A traced function called from an eager tensor-count body draws from the sub-stream, as
// its ops do when the enclosing loop is traced (and the function is inlined).
TEST(TraceLoop, TracedFunctionInsideATensorCountBodyUsesTheSubstream) {
  auto noise = trace::function([](const Tensor& t) { return t + randn(t.shape()); });
  auto body = [&](const std::vector<Tensor>& s) { return std::vector<Tensor>{noise(s[0]) * 0.5}; };
  Tensor a = zeros({5});
  noise(a);  // traced once: later calls from the eager body replay
  auto outer = trace::function(
      [&](const Tensor& x, const Tensor& n) { return trace::loop(n, body, {x})[0] + randn({5}); });
  for (int64_t n : {3, 1}) {
    manual_seed(21);
    Tensor eager = trace::loop(n_of(n), body, {a})[0] + randn({5});
    manual_seed(21);
    Tensor traced = outer(a, n_of(n));
    EXPECT_TRUE(bitwise_equal(eager, traced)) << "n = " << n;
  }
}

// The sub-stream is not the int-count stream: same seed, same body, other numbers.
TEST(TraceLoop, TensorCountNumbersDifferFromIntCount) {
  Tensor a = zeros({3}), b = zeros({2, 2}, DType::float64);
  manual_seed(77);
  std::vector<Tensor> by_int = trace::loop(3, random_body, {a, b});
  manual_seed(77);
  std::vector<Tensor> by_tensor = trace::loop(n_of(3), random_body, {a, b});
  for (size_t i = 0; i < 2; ++i) EXPECT_FALSE(bitwise_equal(by_int[i], by_tensor[i])) << i;
}

// Loops nest: an inner loop takes its counters from the enclosing loop's sub-stream.
TEST(TraceLoop, NestedLoopsWithRandomOpsMatchEager) {
  auto run = [](const Tensor& x, const Tensor& n, const Tensor& m) {
    Tensor y = trace::loop(
        n,
        [&](const Tensor& s) {
          Tensor inner = trace::loop(
              2, [](const Tensor& t) { return t + randn({3}); }, s);
          return trace::loop(
                     m, [](const Tensor& t) { return t * 0.5 + rand({3}); }, inner) +
                 randn({3});
        },
        x);
    return trace::loop(
        3,
        [&](const Tensor& s) {  // a tensor count inside an int count
          return trace::loop(
              m, [](const Tensor& t) { return t - rand({3}); }, s);
        },
        y);
  };
  auto f = trace::function(run);
  Tensor x = zeros({3});
  const std::vector<std::pair<int64_t, int64_t>> counts{{2, 3}, {3, 0}, {0, 2}, {1, 1}};
  manual_seed(5);
  std::vector<Tensor> traced;
  for (auto [n, m] : counts) traced.push_back(f(x, n_of(n), n_of(m)));
  manual_seed(5);
  for (size_t c = 0; c < counts.size(); ++c)
    EXPECT_TRUE(bitwise_equal(traced[c], run(x, n_of(counts[c].first), n_of(counts[c].second))))
        << c;
}

TEST(TraceLoop, TensorCountBodyWithTwoGeneratorsIsRefused) {
  Generator other(5);
  auto body = [&](const Tensor& t) { return t + randn({2}) + rand({2}, DType::float32, other); };
  auto run = [&](const Tensor& x, const Tensor& n) { return trace::loop(n, body, x); };
  auto f = trace::function(run);
  Tensor x = ones({2});
  const std::string msg =
      "[loop] random ops inside one trace::loop body with a tensor count "
      "must draw from one generator";
  for (int64_t n : {2, 0}) {
    EXPECT_NE(error_of([&] { f(x, n_of(n)); }).find(msg), std::string::npos) << "traced " << n;
    EXPECT_NE(error_of([&] { run(x, n_of(n)); }).find(msg), std::string::npos) << "eager " << n;
  }
  // One generator that is not the default one is fine.
  auto own = [&](const Tensor& x, const Tensor& n) {
    return trace::loop(
        n, [&](const Tensor& t) { return t + randn({2}, DType::float32, other); }, x);
  };
  auto g = trace::function(own);
  other.manual_seed(3);
  Tensor t = g(x, n_of(4));
  other.manual_seed(3);
  EXPECT_TRUE(bitwise_equal(t, own(x, n_of(4))));
}

TEST(TraceLoop, ErrorsAreClear) {
  Tensor x = ones({2});
  EXPECT_NE(error_of([&] { trace::loop(-1, step, x); }).find("[loop] count must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              trace::loop(
                  2, [](const Tensor& t) { return sum(t); }, x);
            }).find("but the body returned"),
            std::string::npos);
  EXPECT_NE(error_of([&] { trace::loop(ones({2}), step, x); }).find("one-element"),
            std::string::npos);
  // A 16-bit count (a compiled chain reads float32, float64, int32 and int64 counts only).
  EXPECT_NE(error_of([&] {
              trace::loop(ones({1}, DType::bfloat16), step, x);
            }).find("[loop] bfloat16 is not supported yet"),
            std::string::npos);
  // A tensor-count body drawing from two generators: TensorCountBodyWithTwoGeneratorsIsRefused.
  // A negative runtime count fails the replay at sync.
  auto g =
      trace::function([](const Tensor& x, const Tensor& n) { return trace::loop(n, step, x); });
  Tensor bad = g(x, from_vector<int64_t>({-3}, {1}));
  EXPECT_NE(error_of([&] { bad.wait_to_read(); }).find("loop count must be >= 0, got -3"),
            std::string::npos);
  try {
    wait_all();
  } catch (const Error&) {
  }
  // A float count that is no number (or beyond int64) is refused, quoted as stored, the
  // same on every device (core/loop_count.h).
  for (auto [v, text] : {std::pair{NAN, "nan"}, std::pair{INFINITY, "inf"},
                         std::pair{1e30f, "1.0000000150474662e+30"}}) {
    Tensor invalid = g(x, from_vector<float>({v}, {1}));
    std::string e = error_of([&] { invalid.wait_to_read(); });
    EXPECT_NE(e.find(std::string("loop count must be >= 0, got ") + text +
                     " (a float count must be a finite number between -2^63 and 2^63)"),
              std::string::npos)
        << e;
    try {
      wait_all();
    } catch (const Error&) {
    }
  }
  // A negative float count in range: quoted in full, no note.
  Tensor negative = g(x, from_vector<float>({-2.5f}, {1}));
  std::string e = error_of([&] { negative.wait_to_read(); });
  EXPECT_NE(e.find("loop count must be >= 0, got -2.5"), std::string::npos) << e;
  EXPECT_EQ(e.find("finite number"), std::string::npos) << e;
  try {
    wait_all();
  } catch (const Error&) {
  }
}

}  // namespace
}  // namespace tide
