// trace::function: traced replays equal eager bit for bit (fusion none), outputs are fresh,
// captured parameters are used by reference, random ops advance.
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/engine/engine.h"
#include "core/rng.h"
#include "ops/ops.h"
#include "tests/error_of.h"
#include "trace/trace.h"
#include "trace_support.h"

namespace tide {
namespace {

using test_util::error_of;
using testing::bitwise_equal;

Tensor chain(const Tensor& x, const Tensor& y) {
  Tensor a = x * 2.0 + y;
  Tensor b = exp(a * 0.1) - x;
  return relu(b) / (abs(y) + 1.0);
}

TEST(TraceFunction, ElementwiseChainEqualsEagerBitwise) {
  auto f = trace::function(chain, {.name = "chain"});
  for (int call = 0; call < 3; ++call) {
    Tensor x = randn({7, 33}), y = randn({7, 33});
    Tensor traced = f(x, y);
    EXPECT_TRUE(bitwise_equal(traced, chain(x, y))) << "call " << call;
  }
  auto s = f.stats();
  EXPECT_EQ(s.traces, 1);
  EXPECT_EQ(s.replays, 3);
  EXPECT_TRUE(s.retraces.empty());
}

TEST(TraceFunction, BroadcastReduceMatmulSoftmaxEqualEager) {
  auto g = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor h = relu(matmul(x, w) + b);  // broadcasting add
    Tensor p = softmax(h);
    Tensor l = log_softmax(h);
    return std::vector<Tensor>{sum(p, 1), mean(l), max(h, 0), matmul(w, h, {false, true})};
  };
  auto f = trace::function(g);
  Tensor x = randn({5, 4}), w = randn({4, 6}), b = randn({6});
  std::vector<Tensor> traced = f(x, w, b), eager = g(x, w, b);
  ASSERT_EQ(traced.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(bitwise_equal(traced[i], eager[i])) << i;
}

TEST(TraceFunction, OutputsAreFreshEveryCall) {
  auto f = trace::function([](const Tensor& x) { return x + 1.0; });
  Tensor x = full({4}, 1.0);
  Tensor first = f(x);
  Tensor second = f(full({4}, 5.0));
  EXPECT_EQ(first.to_vector<double>(), std::vector<double>(4, 2.0));
  EXPECT_EQ(second.to_vector<double>(), std::vector<double>(4, 6.0));
  EXPECT_NE(first.storage(), second.storage());
}

TEST(TraceFunction, CapturedParametersAreUsedByReference) {
  Tensor w = full({3}, 2.0);
  auto f = trace::function([&](const Tensor& x) { return x * w; });
  Tensor x = ones({3});
  EXPECT_EQ(f(x).to_vector<double>(), std::vector<double>(3, 2.0));
  w.copy_(full({3}, 3.0));  // the graph sees the new value
  EXPECT_EQ(f(x).to_vector<double>(), std::vector<double>(3, 3.0));
}

TEST(TraceFunction, InPlaceUpdatesOfCapturesAreNodes) {
  Tensor acc = zeros({2});
  auto f = trace::function([&](const Tensor& x) { acc.add_(x); });
  for (int i = 0; i < 4; ++i) f(full({2}, 1.5));
  EXPECT_EQ(acc.to_vector<double>(), std::vector<double>(2, 6.0));
}

TEST(TraceFunction, ReturnsArgumentsAndCapturesAsTheSameTensors) {
  Tensor w = ones({2});
  auto f = trace::function([&](const Tensor& x) { return std::pair<Tensor, Tensor>{x, w}; });
  Tensor x = full({2}, 4.0);
  auto [a, b] = f(x);
  EXPECT_EQ(a.storage(), x.storage());
  EXPECT_EQ(b.storage(), w.storage());
}

TEST(TraceFunction, RandomOpsGiveEagerNumbersAndAdvance) {
  auto g = [](const Tensor& x) { return x + randn({3, 5}); };
  auto f = trace::function(g);
  Tensor x = zeros({3, 5});
  manual_seed(7);
  std::vector<Tensor> traced;
  for (int i = 0; i < 3; ++i) traced.push_back(f(x));
  manual_seed(7);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(bitwise_equal(traced[size_t(i)], g(x))) << i;
  EXPECT_FALSE(bitwise_equal(traced[0], traced[1]));
}

// The transformer's elementwise ops (gelu in both forms, dropout) and their gradients, traced
// plain, fused, on two streams and verified, equal eager bit for bit call after call, and the
// dropout mask advances with its generator as eager's does.
TEST(TraceFunction, GeluAndDropoutWithGradientsEqualEagerBitwise) {
  auto step = [](Tensor& w, Generator& gen) {
    return [&w, &gen](const Tensor& x) {
      w.zero_grad();
      Tensor h = gelu(x * w) - 0.25;
      Tensor y = dropout(gelu(h, GeluApprox::tanh) * 2.0, 0.3, true, gen);
      sum(y * y).backward();
      return std::vector<Tensor>{y, w.grad()};
    };
  };
  const std::vector<trace::Options> variants{
      {.name = "plain"},
      {.name = "fused", .fusion = trace::Fusion::elementwise},
      {.name = "streams", .streams = 2},
      {.name = "verify", .verify = true}};
  for (const trace::Options& o : variants) {
    SCOPED_TRACE(o.name);
    Tensor we = randn({4, 33}), wt = clone(we);
    we.requires_grad_();
    wt.requires_grad_();
    Generator ge(9), gt(9);
    auto eager = step(we, ge);
    auto f = trace::function(step(wt, gt), o);
    std::vector<Tensor> previous;
    for (int call = 0; call < 3; ++call) {
      Tensor x = randn({4, 33});
      std::vector<Tensor> traced = f(x), want = eager(x);
      ASSERT_EQ(traced.size(), 2u);
      EXPECT_TRUE(bitwise_equal(traced[0], want[0])) << "y, call " << call;
      EXPECT_TRUE(bitwise_equal(traced[1], want[1])) << "w.grad(), call " << call;
      EXPECT_EQ(gt.offset(), ge.offset()) << call;
      if (!previous.empty()) {
        std::vector<float> now = traced[0].to_vector<float>(),
                           before = previous[0].to_vector<float>();
        int64_t zero_now = 0, same = 0;
        for (size_t i = 0; i < now.size(); ++i) {
          zero_now += now[i] == 0.0f;
          same += (now[i] == 0.0f) == (before[i] == 0.0f);
        }
        EXPECT_GT(zero_now, 0) << call;
        EXPECT_LT(same, int64_t(now.size())) << "the mask did not change, call " << call;
      }
      previous = traced;
    }
    EXPECT_EQ(f.stats().traces, 1);
  }
}

TEST(TraceFunction, VoidFunctionsAndConstantsWork) {
  Tensor out = zeros({3});
  auto f = trace::function([&](const Tensor& x) {
    Tensor c = from_data({1.0, 2.0, 3.0}, {3});  // host data: a constant of the graph
    out.copy_(x * c);
  });
  f(full({3}, 2.0));
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{2, 4, 6}));
  f(full({3}, 3.0));
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{3, 6, 9}));
}

// An argument that requires grad would get no gradient from a replay: refused clearly
// (and nothing recorded), unless gradients are off for the call.
TEST(TraceFunction, ArgumentsRequiringGradAreRefused) {
  Tensor w = full({2}, 2.0);
  auto f = trace::function([&](const Tensor& x) { return sum(x * w); }, {.name = "loss"});
  Tensor x = full({2}, 3.0);
  x.requires_grad_();
  std::string e = error_of([&] { f(x); });
  EXPECT_NE(e.find("[trace] trace::function 'loss': tensor argument 0 requires grad"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("detach()"), std::string::npos) << e;
  EXPECT_EQ(f.stats().calls, 0);
  EXPECT_EQ(f(x.detach()).item<float>(), 12.0f);
  {
    autograd::NoGrad off;
    EXPECT_EQ(f(x).item<float>(), 12.0f) << "no gradient is wanted";
  }
}

// A function that calls itself (recursion on an int argument) or reads its own stats():
// traced, the inner calls run inline; eager (warm-up) calls re-enter the function. The
// warm-up case deadlocked on the function's lock.
TEST(TraceFunction, ReentrantCallsDoNotDeadlock) {
  std::function<Tensor(const Tensor&, int)> self;
  int64_t seen_calls = -1;
  auto f = trace::function(
      [&](const Tensor& x, int depth) -> Tensor {
        if (depth == 0) return x + 1.0;
        return self(x, depth - 1) * 2.0;
      },
      {.warmup_calls = 1});
  self = [&](const Tensor& x, int depth) {
    seen_calls = f.stats().calls;
    return f(x, depth);
  };
  for (int call = 0; call < 3; ++call) {  // warm-up (eager, re-entering), trace, replay
    EXPECT_EQ(f(ones({2}), 2).to_vector<float>(), std::vector<float>(2, 8.0f)) << call;
    EXPECT_GE(seen_calls, 1) << call;
  }
  EXPECT_EQ(f.stats().replays, 2);  // the call that traced, and the last
  EXPECT_EQ(f.stats().traces, 1);
}

TEST(TraceFunction, NonTensorArgumentsArePartOfTheSignature) {
  auto f = trace::function([](const Tensor& x, double s, int k) { return x * s + double(k); });
  Tensor x = ones({2});
  EXPECT_EQ(f(x, 2.0, 1).to_vector<double>(), std::vector<double>(2, 3.0));
  EXPECT_EQ(f(x, 3.0, 1).to_vector<double>(), std::vector<double>(2, 4.0));
  EXPECT_EQ(f(x, 3.0, 1).to_vector<double>(), std::vector<double>(2, 4.0));
  EXPECT_EQ(f.stats().traces, 2);
}

TEST(TraceFunction, ReplayAllocatesOnlyItsOutputs) {
  auto f = trace::function(chain);
  Tensor x = randn({64, 64}), y = randn({64, 64});
  f(x, y).wait_to_read();
  wait_all();
  AllocatorStats before = Allocator::get().stats();
  Tensor r = f(x, y);
  wait_all();
  AllocatorStats after = Allocator::get().stats();
  EXPECT_EQ(after.num_allocs - before.num_allocs, 1u);
  auto s = f.stats();
  EXPECT_EQ(s.last_call_allocated, Allocator::round_size(s.output_bytes));
  EXPECT_EQ(s.measured_call_bytes, s.last_call_allocated);  // the plan foresaw everything
  EXPECT_LT(s.arena_bytes, s.unplanned_bytes);
}

// Kernels that take workspace while a replay runs show up in measured_call_bytes, on
// every thread that runs nodes.
TEST(TraceFunction, MeasuredBytesShowWorkspacesThePlanDidNotForesee) {
  for (int streams : {1, 2}) {
    auto f = trace::function(
        [](const Tensor& x) {
          std::vector<Tensor> out;
          for (int k = 0; k < 2; ++k) {  // two independent nodes that each take 4 KB
            Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), "scratchy");
            Storage* r = x.storage();
            Storage* w = y.storage();
            Engine::get().submit(
                Device::cpu(), "scratchy", {r}, {w},
                [] { Allocator::get().workspace(4096, "scratchy"); }, Site::current());
            out.push_back(y);
          }
          return out;
        },
        {.name = "scratchy", .streams = streams});
    Tensor x = ones({8});
    f(x);
    wait_all();
    auto s = f.stats();
    EXPECT_EQ(s.measured_call_bytes, s.last_call_allocated + 2 * Allocator::round_size(4096))
        << "streams " << streams;
  }
}

// An argument no node reads or writes is not declared to the engine, so nothing keeps it
// alive (or orders it) for the replay, which may run after the caller dropped it: the
// replay must not bind its input slot to it. (Storage objects are pooled, so a sanitizer
// would not see the stale read; the slot shows it.)
TEST(TraceFunction, AReplayLeavesAnArgumentNoNodeUsesAlone) {
  auto f = trace::function([](const Tensor& x, const Tensor&) { return x * 2.0; });
  Tensor x = ones({4}), traced_with = ones({3});
  EXPECT_EQ(f(x, traced_with).to_vector<float>(), (std::vector<float>(4, 2.0f)));
  Tensor unused = ones({3});  // another argument of the same signature: a replay
  EXPECT_EQ(f(x, unused).to_vector<float>(), (std::vector<float>(4, 2.0f)));
  EXPECT_EQ(f.stats().traces, 1);
  std::shared_ptr<trace::Graph> g = f.graph(x, unused);
  ASSERT_NE(g, nullptr);
  EXPECT_NE(g->values[size_t(g->inputs[1])].storage->data(), unused.storage()->data())
      << "the replay bound a slot no node reads to an argument it does not keep";
  EXPECT_EQ(g->values[size_t(g->inputs[0])].storage->data(), x.storage()->data())
      << "the argument the graph reads is bound";
}

}  // namespace
}  // namespace tide
