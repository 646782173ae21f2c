// The GPU trace executor (trace/cuda/device_graph.h) on a recording fake of a GPU: trace::loop as
// a WHILE node of the CUDA graph (int and tensor counts, unrolled launches, chained
// iterations, nested loops, training and random ops in the body) equals the eager loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <utility>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/engine/engine.h"
#include "core/rng.h"
#include "device_graph_support.h"
#include "fake_gpu.h"
#include "ops/ops.h"
#include "tests/error_of.h"
#include "tests/train_rig.h"
#include "trace/cuda/device_graph.h"
#include "trace/cuda/device_loop.h"
#include "trace/trace.h"
#include "trace_support.h"

namespace tide {
namespace {

using namespace device_graph_test;
using test_util::error_of;

// ---- trace::loop: a WHILE node of the CUDA graph ----

// n copies of s.
std::string times(int n, const std::string& s) {
  std::string r;
  for (int i = 0; i < n; ++i) r += s;
  return r;
}

TEST(DeviceGraphLoop, AnIntCountLoopIsAWhileNodeAndEqualsEager) {
  auto f =
      trace::function([](const Tensor& x) { return trace::loop(5, step, x); }, {.loop_unroll = 1});
  for (int call = 0; call < 3; ++call) {
    Tensor x = on_gpu(values(6, float(call + 1)), {2, 3});
    EXPECT_EQ(f(x).to_vector<float>(), trace::loop(5, step, x).to_vector<float>()) << call;
  }
  trace::FunctionStats s = f.stats();
  EXPECT_EQ(s.graph_fallback, "");
  Tensor x = on_gpu(values(6, 1), {2, 3});
  std::shared_ptr<trace::Graph> g = f.graph(x);
  ASSERT_TRUE(g);
  ASSERT_EQ(g->nodes.size(), 1u);
  // input copy; the loop's start kernel, WHILE node and state copy-out; output copy.
  FakeDevice::GraphShape shape = fake().graph_shape(g->device_graph->exec);
  EXPECT_EQ(shape.kinds, "mswmm");
  EXPECT_EQ(shape.edges, (std::vector<std::pair<int, int>>{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(shape.ops[1], 1u) << "the start kernel copies the initial state";
  ASSERT_EQ(shape.bodies.size(), 1u);
  // The body: its two ops captured (the trace's edge between them), then the step kernel.
  const FakeDevice::GraphShape& body = shape.bodies[0];
  EXPECT_EQ(body.kinds, "kke");
  EXPECT_EQ(body.edges, (std::vector<std::pair<int, int>>{{0, 1}, {1, 2}}));
  EXPECT_EQ(body.ops[2], 1u) << "the step kernel copies the next state";
  EXPECT_EQ(s.graph_nodes, 5u);
}

// A small body runs several iterations per launch of its body graph (a launch costs the
// device more than the body's nodes), and the remainder one per launch in a second WHILE
// node: any count gives eager's result.
TEST(DeviceGraphLoop, AnUnrolledLoopRunsSeveralIterationsPerLaunchThenTheRest) {
  auto f = trace::function([](const Tensor& x, const Tensor& n) { return trace::loop(n, step, x); },
                           {.loop_unroll = 3});
  Tensor x = on_gpu(values(4, 0.5f), {4});
  for (int64_t n : {0, 1, 2, 3, 4, 5, 6, 7, 9, 10, -3}) {
    Tensor count = from_vector(std::vector<int64_t>{n}, Shape({1}), gpu());
    EXPECT_EQ(f(x, count).to_vector<float>(),
              trace::loop(std::max<int64_t>(n, 0), step, x).to_vector<float>())
        << "n = " << n;
  }
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().graph_fallback, "");
  Tensor count = from_vector(std::vector<int64_t>{1}, Shape({1}), gpu());
  FakeDevice::GraphShape shape = fake().graph_shape(f.graph(x, count)->device_graph->exec);
  // two input copies; the start kernel, the main and the rest WHILE nodes, in a row; the
  // state's copy-out; the output copy.
  EXPECT_EQ(shape.kinds, "mmswwmm");
  for (std::pair<int, int> e : {std::pair{2, 3}, {3, 4}, {4, 5}})
    EXPECT_NE(std::find(shape.edges.begin(), shape.edges.end(), e), shape.edges.end())
        << e.first << " -> " << e.second;
  ASSERT_EQ(shape.bodies.size(), 2u);
  // Main: three iterations chained (each the body's two ops, passing the state on through
  // the state's and the next state's buffers), then one step kernel for the three, which
  // copies the state back (an odd count of iterations leaves it in the next state's).
  EXPECT_EQ(shape.bodies[0].kinds, times(3, "kk") + "e");
  std::vector<std::pair<int, int>> chain;
  for (int i = 0; i + 1 < 7; ++i) chain.emplace_back(i, i + 1);
  EXPECT_EQ(shape.bodies[0].edges, chain);
  EXPECT_EQ(shape.bodies[0].ops.back(), 1u) << "the copy back";
  EXPECT_EQ(shape.bodies[1].kinds, "kke") << "the rest: one iteration per launch";

  // Chosen per loop (0): about 32 nodes per launch. The body is 2 nodes and a step: 10
  // iterations; with an int count below that, the count. An even count ends in the state
  // buffer: its step copies nothing.
  for (int64_t n : {40, 4}) {
    auto g = trace::function([n](const Tensor& x) { return trace::loop(n, step, x); });
    EXPECT_EQ(g(x).to_vector<float>(), trace::loop(n, step, x).to_vector<float>()) << n;
    FakeDevice::GraphShape s = fake().graph_shape(g.graph(x)->device_graph->exec);
    ASSERT_EQ(s.bodies.size(), 2u) << n;
    EXPECT_EQ(s.bodies[0].kinds, times(n == 40 ? 10 : 4, "kk") + "e") << n;
    EXPECT_EQ(s.bodies[0].ops.back(), 0u) << n;
  }
  EXPECT_EQ(trace::loop_unroll_for(1, false, 0), 16);
  EXPECT_EQ(trace::loop_unroll_for(2, false, 0), 10);
  EXPECT_EQ(trace::loop_unroll_for(40, false, 0), 1);
  EXPECT_EQ(trace::loop_unroll_for(2, true, 0), 1) << "a loop inside";
  EXPECT_EQ(trace::loop_unroll_for(40, true, 7), 7);
  std::string e =
      error_of([] { trace::function([](const Tensor& x) { return x; }, {.loop_unroll = -1}); });
  EXPECT_NE(e.find("loop_unroll must be in [0, 1024]"), std::string::npos) << e;
  e = error_of([] { trace::function([](const Tensor& x) { return x; }, {.loop_unroll = 5000}); });
  EXPECT_NE(e.find("got 5000"), std::string::npos) << e;
}

TEST(DeviceGraphLoop, ATensorCountIsReadOnTheDeviceAtEveryReplay) {
  auto f =
      trace::function([](const Tensor& x, const Tensor& n) { return trace::loop(n, step, x); });
  Tensor x = on_gpu(values(4, 0.5f), {4});
  for (int64_t n : {3, 0, 7, 1}) {
    Tensor count = from_vector(std::vector<int64_t>{n}, Shape({1}), gpu());
    EXPECT_EQ(f(x, count).to_vector<float>(), trace::loop(n, step, x).to_vector<float>())
        << "n = " << n;
  }
  EXPECT_EQ(f.stats().traces, 1) << "one graph for every count";
  EXPECT_EQ(f.stats().graph_fallback, "");
  Tensor fcount = from_vector(std::vector<double>{4.0}, Shape({1}), gpu());
  auto g =
      trace::function([](const Tensor& x, const Tensor& n) { return trace::loop(n, step, x); });
  EXPECT_EQ(g(x, fcount).to_vector<float>(), trace::loop(4, step, x).to_vector<float>())
      << "a float64 count";
  // In a graph the kernels cannot throw: a negative count runs no iteration.
  Tensor negative = from_vector(std::vector<int64_t>{-2}, Shape({1}), gpu());
  EXPECT_EQ(f(x, negative).to_vector<float>(), x.to_vector<float>());
}

// The body gets its state by value on a GPU too: writing it in place leaves the caller's
// tensor as it was, as the eager loop does.
TEST(DeviceGraphLoop, ABodyWritingItsStateInPlaceLeavesTheCallersTensor) {
  auto body = [](const Tensor& s) {
    Tensor t = s;  // the same tensor
    t.mul_(2.0);
    return t + 1.0;
  };
  auto f = trace::function([&](const Tensor& x) { return trace::loop(3, body, x); });
  const std::vector<float> start{1, -2, 0.5f}, want{15, -9, 11};
  for (int call = 0; call < 2; ++call) {
    Tensor x = on_gpu(start, {3});
    EXPECT_EQ(trace::loop(3, body, x).to_vector<float>(), want);
    EXPECT_EQ(f(x).to_vector<float>(), want);
    EXPECT_EQ(x.to_vector<float>(), start) << "call " << call;
  }
  EXPECT_EQ(f.stats().graph_fallback, "");
}

// Training steps inside a WHILE node's body equal the eager loop (parameters, losses,
// .grad); a backward() through the loop node itself is refused, as on the CPU.
TEST(DeviceGraphLoop, TrainingStepsInTheBodyEqualEagerAndBackwardThroughIsRefused) {
  Tensor we = on_gpu({0.5f, 0.5f, 0.5f}, {3}), wt = on_gpu({0.5f, 0.5f, 0.5f}, {3});
  we.requires_grad_();
  wt.requires_grad_();
  auto eager = testing::sgd_steps_in_a_loop(we);
  auto f = trace::function(testing::sgd_steps_in_a_loop(wt));
  Tensor x = on_gpu({1, 2, 3}, {3});
  for (int call = 0; call < 3; ++call) {
    EXPECT_EQ(f(x).to_vector<float>(), eager(x).to_vector<float>()) << call;
    EXPECT_EQ(wt.to_vector<float>(), we.to_vector<float>()) << call;
    EXPECT_EQ(wt.grad().to_vector<float>(), we.grad().to_vector<float>()) << call;
  }
  EXPECT_EQ(f.stats().graph_fallback, "");
  auto through = trace::function([&](const Tensor& x) {
    Tensor s = trace::loop(
        2, [&](const Tensor& s) { return s * wt; }, x);
    sum(s).backward();
  });
  EXPECT_NE(error_of([&] { through(x); }).find("no gradient flows through the trace::loop"),
            std::string::npos);
}

TEST(DeviceGraphLoop, StatesSwappedByTheBodyGoThroughASpareBuffer) {
  // Fibonacci: the next first state is the current second one, read from a state buffer
  // the step kernel overwrites (the fake checks that no copy reads what another writes).
  auto fib = [](const std::vector<Tensor>& s) { return std::vector<Tensor>{s[1], s[0] + s[1]}; };
  auto f = trace::function([&](const Tensor& a, const Tensor& b) {
    std::vector<Tensor> r = trace::loop(10, fib, {a, b});
    return std::vector<Tensor>{r[0], r[1]};
  });
  Tensor a = on_gpu({0, 1}, {2}), b = on_gpu({1, 1}, {2});
  std::vector<Tensor> traced = f(a, b), eager = trace::loop(10, fib, {a, b});
  EXPECT_EQ(traced[0].to_vector<float>(), eager[0].to_vector<float>());
  EXPECT_EQ(traced[1].to_vector<float>(), eager[1].to_vector<float>());
  EXPECT_EQ(traced[0].to_vector<float>(), (std::vector<float>{55, 89}));
  EXPECT_EQ(f.stats().graph_fallback, "");
  FakeDevice::GraphShape shape = fake().graph_shape(f.graph(a, b)->device_graph->exec);
  ASSERT_EQ(shape.bodies.size(), 2u);
  // Ten iterations per launch (a count of 10; 16 for a body of one node): each the add, a
  // copy into the spare buffer, the step. The rest never runs, but is there.
  EXPECT_EQ(shape.bodies[0].kinds, times(10, "kme"));
  EXPECT_EQ(shape.bodies[1].kinds, "kme");
}

TEST(DeviceGraphLoop, NestedLoopsAndCapturedParametersEqualEager) {
  Tensor w = on_gpu(values(9, 0.1f), {3, 3});
  auto inner = [&](const Tensor& t) { return relu(matmul(t, w)) + 1.0; };
  auto outer = [&](const Tensor& s) { return trace::loop(3, inner, s) * 0.5; };
  auto f = trace::function([&](const Tensor& x) { return trace::loop(4, outer, x); });
  Tensor x = on_gpu(values(6, 0.3f), {2, 3});
  EXPECT_EQ(f(x).to_vector<float>(), trace::loop(4, outer, x).to_vector<float>());
  EXPECT_EQ(f.stats().graph_fallback, "");
  FakeDevice::GraphShape shape = fake().graph_shape(f.graph(x)->device_graph->exec);
  // The outer loop's body (the inner loop, the multiply) holds a loop: one iteration per
  // launch. The inner loop is a start kernel, its two WHILE nodes (its 3 iterations in one
  // launch, then the rest) and a copy-out.
  ASSERT_EQ(shape.bodies.size(), 1u);
  EXPECT_EQ(shape.bodies[0].kinds, "swwmke") << "the inner loop inside the outer body";
  ASSERT_EQ(shape.bodies[0].bodies.size(), 2u);
  EXPECT_EQ(shape.bodies[0].bodies[0].kinds, times(3, "kkk") + "e") << "chained";
  // Unrolled on request, the inner loop is added once per outer iteration.
  auto g = trace::function([&](const Tensor& x) { return trace::loop(4, outer, x); },
                           {.loop_unroll = 2});
  EXPECT_EQ(g(x).to_vector<float>(), trace::loop(4, outer, x).to_vector<float>());
  shape = fake().graph_shape(g.graph(x)->device_graph->exec);
  ASSERT_EQ(shape.bodies.size(), 2u);
  EXPECT_EQ(shape.bodies[0].kinds, times(2, "swwmke"));
}

// Chained iterations (trace/cuda/device_loop.h): where each next state is a value the body
// returns, the unrolled iterations pass the states on through the state buffers and the
// next states' buffers, and one step kernel per launch takes them all off the counter.
// Two states that read each other and a captured parameter, odd and even unrolls, any
// count: eager's results.
TEST(DeviceGraphLoop, ChainedIterationsPassTheStatesOnAndEqualEager) {
  Tensor w = on_gpu(values(3, 0.25f), {3});
  auto body = [&](const std::vector<Tensor>& s) {
    return std::vector<Tensor>{s[0] * 0.5 + s[1], s[1] - s[0] * w};
  };
  for (int unroll : {2, 3}) {
    auto f = trace::function(
        [&](const Tensor& a, const Tensor& b, const Tensor& n) {
          std::vector<Tensor> r = trace::loop(n, body, {a, b});
          return std::vector<Tensor>{r[0], r[1]};
        },
        {.loop_unroll = unroll});
    Tensor a = on_gpu(values(3, 1), {3}), b = on_gpu(values(3, 2), {3});
    for (int64_t n : {0, 1, 2, 3, 4, 5, 6, 7, 11}) {
      Tensor count = from_vector(std::vector<int64_t>{n}, Shape({1}), gpu());
      std::vector<Tensor> traced = f(a, b, count), eager = trace::loop(n, body, {a, b});
      EXPECT_EQ(traced[0].to_vector<float>(), eager[0].to_vector<float>()) << unroll << ", " << n;
      EXPECT_EQ(traced[1].to_vector<float>(), eager[1].to_vector<float>()) << unroll << ", " << n;
    }
    EXPECT_EQ(f.stats().traces, 1);
    EXPECT_EQ(f.stats().graph_fallback, "");
    Tensor count = from_vector(std::vector<int64_t>{1}, Shape({1}), gpu());
    FakeDevice::GraphShape shape = fake().graph_shape(f.graph(a, b, count)->device_graph->exec);
    ASSERT_EQ(shape.bodies.size(), 2u);
    const std::string& main = shape.bodies[0].kinds;
    EXPECT_EQ(std::count(main.begin(), main.end(), 'e'), 1) << main;
    EXPECT_EQ(main.back(), 'e') << main;
    EXPECT_EQ(shape.bodies[0].ops.back(), unroll % 2 ? 2u : 0u)
        << "after an odd count of iterations the step copies both states back";
    const std::string& rest = shape.bodies[1].kinds;
    EXPECT_EQ(std::count(rest.begin(), rest.end(), 'e'), 1) << "the rest: one iteration a launch";
  }
}

TEST(DeviceGraphLoop, AFallbackLaunchRunsTheLoopNodeByNode) {
  auto f = trace::function(
      [](const Tensor& x, const Tensor& n) { return trace::loop(n, step, x * 2.0); });
  fake().refuse_next_capture("not this one");
  Tensor x = on_gpu(values(5, 1), {5});
  for (int64_t n : {2, 0, 6}) {
    Tensor count = from_vector(std::vector<int64_t>{n}, Shape({1}), gpu());
    EXPECT_EQ(f(x, count).to_vector<float>(), trace::loop(n, step, x * 2.0).to_vector<float>())
        << "n = " << n;
  }
  EXPECT_NE(f.stats().graph_fallback.find("not this one"), std::string::npos)
      << f.stats().graph_fallback;
  Tensor negative = from_vector(std::vector<int64_t>{-1}, Shape({1}), gpu());
  std::string e = error_of([&] { (void)f(x, negative).to_vector<float>(); });
  EXPECT_NE(e.find("loop count must be >= 0, got -1"), std::string::npos) << e;
}

TEST(DeviceGraphLoop, AFusedOneStateBodyRunsAllIterationsInOneKernel) {
  auto body = [](const Tensor& y) { return (y + 1.0) * 0.5; };
  auto f =
      trace::function([&](const Tensor& x, const Tensor& n) { return trace::loop(n, body, x); },
                      {.fusion = trace::Fusion::elementwise});
  Tensor x = on_gpu(values(9, 2), {9});
  for (int64_t n : {5, 0, 12}) {
    Tensor count = from_vector(std::vector<int64_t>{n}, Shape({1}), gpu());
    EXPECT_EQ(f(x, count).to_vector<float>(), trace::loop(n, body, x).to_vector<float>())
        << "n = " << n;
  }
  EXPECT_EQ(f.stats().graph_fallback, "");
  Tensor count = from_vector(std::vector<int64_t>{1}, Shape({1}), gpu());
  FakeDevice::GraphShape shape = fake().graph_shape(f.graph(x, count)->device_graph->exec);
  // two input copies; initial state copy, the chain kernel, copy-out; output copy.
  EXPECT_EQ(shape.kinds, "mmmkmm");
  EXPECT_TRUE(shape.bodies.empty()) << "no WHILE node";
  // And node by node.
  auto g = trace::function([&](const Tensor& x) { return trace::loop(7, body, x * 1.0); },
                           {.fusion = trace::Fusion::elementwise});
  fake().refuse_next_capture("fallback");
  EXPECT_EQ(g(x).to_vector<float>(), trace::loop(7, body, x * 1.0).to_vector<float>());
  EXPECT_NE(g.stats().graph_fallback, "");
  // Empty states: CUDA has no zero-length copy nodes, and the loops need none (fused, and
  // as a WHILE node).
  for (trace::Fusion fusion : {trace::Fusion::elementwise, trace::Fusion::none}) {
    auto h = trace::function([&](const Tensor& x) { return trace::loop(3, body, x * 1.0); },
                             {.fusion = fusion});
    for (int call = 0; call < 2; ++call)
      EXPECT_EQ(h(zeros({0}, DType::float32, gpu())).shape(), Shape({0}));
    EXPECT_EQ(h.stats().graph_fallback, "");
  }
}

// A fused loop body that reads the enclosing function's values (its argument, an outer
// loop's state): the body's chains are uploaded once the enclosing graph has given those
// values their memory (before, their addresses were null: a crash).
TEST(DeviceGraphLoop, FusedBodiesReadingTheEnclosingValuesEqualEager) {
  auto one_state = [](const Tensor& x, const Tensor& n) {
    return trace::loop(
        n, [&x](const Tensor& s) { return (s * 0.5 + x) * 2.0; }, x * 1.0);
  };
  auto two_states = [](const Tensor& x) {
    std::vector<Tensor> r =
        trace::loop(3,
                    [&x](const std::vector<Tensor>& s) {
                      return std::vector<Tensor>{(s[0] * 0.5 + x) * 2.0, s[1] + s[0]};
                    },
                    {x * 1.0, x * 2.0});
    return r[1];
  };
  auto nested = [](const Tensor& x) {
    return trace::loop(
        2,
        [](const Tensor& s) {
          return trace::loop(
              3, [&s](const Tensor& t) { return t * 0.5 + s; }, s * 1.0);
        },
        x * 1.0);
  };
  const trace::Options fused{.fusion = trace::Fusion::elementwise};
  auto f = trace::function(one_state, fused);
  auto g = trace::function(two_states, fused);
  auto h = trace::function(nested, fused);
  for (int call = 0; call < 3; ++call) {
    Tensor x = on_gpu({1, 2, float(call)}, {3});
    Tensor n = from_vector(std::vector<int64_t>{3}, Shape({1}), gpu());
    EXPECT_EQ(f(x, n).to_vector<float>(), one_state(x, n).to_vector<float>()) << call;
    EXPECT_EQ(g(x).to_vector<float>(), two_states(x).to_vector<float>()) << call;
    EXPECT_EQ(h(x).to_vector<float>(), nested(x).to_vector<float>()) << call;
  }
  EXPECT_EQ(f.stats().graph_fallback, "");
  EXPECT_GT(f.stats().fused_kernels + g.stats().fused_kernels, 0);
}

// An output that a loop body also reads is fresh on every call, as eager's.
TEST(DeviceGraphLoop, AnOutputTheBodyReadsIsFreshPerCall) {
  auto body = [](const Tensor& x) {
    Tensor y = x * 2.0;
    Tensor r = trace::loop(
        2, [&y](const Tensor& s) { return s + y; }, x);
    return std::vector<Tensor>{y, r};
  };
  for (trace::Fusion fusion : {trace::Fusion::none, trace::Fusion::elementwise}) {
    auto f = trace::function(body, {.fusion = fusion});
    std::vector<Tensor> first = f(on_gpu({1, 1}, {2}));
    std::vector<Tensor> second = f(on_gpu({10, 10}, {2}));
    EXPECT_EQ(second[0].to_vector<float>(), (std::vector<float>{20, 20}));
    EXPECT_EQ(second[1].to_vector<float>(), (std::vector<float>{50, 50}));
    EXPECT_EQ(first[0].to_vector<float>(), (std::vector<float>{2, 2})) << "not overwritten";
    EXPECT_EQ(first[1].to_vector<float>(), (std::vector<float>{5, 5}));
    EXPECT_NE(first[0].storage(), second[0].storage());
  }
}

// Random ops in a loop body: the loop kernels set and advance their counters on the device,
// so every iteration draws what the eager loop draws (int count: a range; tensor count: a
// sub-stream), in the graph and node by node.
TEST(DeviceGraphLoop, RandomOpsInTheBodyDrawWhatTheEagerLoopDraws) {
  auto body = [](Generator& gen) {
    return [&gen](const Tensor& s) {
      return s * 0.5 + rand({3}, DType::float32, gen, s.device()) -
             randn({3}, DType::float32, gen, s.device());
    };
  };
  for (bool fallback : {false, true}) {
    SCOPED_TRACE(fallback ? "node by node" : "graph");
    Generator tg(31), eg(31);
    auto f = trace::function([&](const Tensor& x, const Tensor& n) {
      Tensor a = trace::loop(4, body(tg), x);  // an int count: a range
      return trace::loop(n, body(tg),
                         a + rand({3}, DType::float32, tg, x.device()));  // a sub-stream
    });
    auto eager = [&](const Tensor& x, const Tensor& n) {
      Tensor a = trace::loop(4, body(eg), x);
      return trace::loop(n, body(eg), a + rand({3}, DType::float32, eg, x.device()));
    };
    if (fallback) fake().refuse_next_capture("fallback");
    Tensor x = on_gpu({1, 2, 3}, {3});
    for (int64_t n : {3, 0, 5, 11}) {  // (the body runs 5 iterations per launch)
      Tensor count = from_vector(std::vector<int64_t>{n}, Shape({1}), gpu());
      EXPECT_EQ(f(x, count).to_vector<float>(), eager(x, count).to_vector<float>()) << "n = " << n;
    }
    EXPECT_EQ(f.stats().graph_fallback.empty(), !fallback) << f.stats().graph_fallback;
  }
}

TEST(DeviceGraphLoop, ALoopWhoseBodyReturnsItsStateUnchanged) {
  auto f = trace::function([](const Tensor& x) {
    return trace::loop(
        3, [](const Tensor& s) { return s; }, x);
  });
  Tensor x = on_gpu({1, 2, 3}, {3});
  Tensor y = f(x);
  EXPECT_EQ(y.device(), gpu());
  EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
}

}  // namespace
}  // namespace tide
