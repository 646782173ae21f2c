// The planner (sharing, the independent overlap walk, outputs never shared) and fusion
// (one kernel per elementwise chain, results within the declared tolerance).
#include <gtest/gtest.h>

#include <cmath>

#include "core/allocator.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "core/profiler.h"
#include "ops/ops.h"
#include "trace/graph.h"
#include "trace/planner.h"
#include "trace/trace.h"
#include "trace_support.h"

namespace tide {
namespace {

using testing::bitwise_equal;

Tensor long_chain(const Tensor& x) {
  Tensor y = x;
  for (int i = 0; i < 12; ++i) y = tanh(y * 1.01 + 0.1);
  return y;
}

TEST(TracePlanner, IntermediatesShareAndNeverOverlapWhileAlive) {
  auto f = trace::function([](const Tensor& x, const Tensor& w) {
    Tensor h = x;
    for (int i = 0; i < 6; ++i) h = relu(matmul(h, w) + 0.5) * 0.5;
    return h;
  });
  Tensor x = randn({32, 32}), w = randn({32, 32});
  f(x, w);
  auto g = f.graph(x, w);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(trace::check_plan(*g), "");
  auto s = f.stats();
  EXPECT_GT(s.unplanned_bytes, 0u);
  EXPECT_LE(s.arena_bytes * 3, s.unplanned_bytes);  // a chain needs about two live buffers
}

TEST(TracePlanner, CheckPlanFindsOverlaps) {
  auto f = trace::function([](const Tensor& x) { return exp(exp(x) + 1.0) * 2.0; });
  Tensor x = randn({100});
  f(x);
  auto g = f.graph(x);
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(trace::check_plan(*g), "");
  // Put every intermediate at offset 0: two that are alive together now collide.
  int moved = 0;
  for (auto& v : g->values)
    if (v.kind == trace::ValueKind::intermediate) {
      v.offset = 0;
      ++moved;
    }
  ASSERT_GE(moved, 2);
  EXPECT_NE(trace::check_plan(*g).find("share bytes"), std::string::npos);
}

TEST(TracePlanner, KeptOutputsAreNeverOverwritten) {
  auto f = trace::function([](const Tensor& x) {
    return std::pair<Tensor, Tensor>{x * 2.0, x + 1.0};
  });
  auto [a1, b1] = f(full({8}, 1.0));
  auto [a2, b2] = f(full({8}, 10.0));
  EXPECT_EQ(a1.to_vector<double>(), std::vector<double>(8, 2.0));
  EXPECT_EQ(b1.to_vector<double>(), std::vector<double>(8, 2.0));
  EXPECT_EQ(a2.to_vector<double>(), std::vector<double>(8, 20.0));
  EXPECT_EQ(b2.to_vector<double>(), std::vector<double>(8, 11.0));
}

TEST(TraceFusion, AChainBecomesOneKernel) {
  auto f = trace::function(long_chain, {.fusion = trace::Fusion::elementwise});
  Tensor x = randn({1000});
  Tensor y = f(x);
  auto s = f.stats();
  EXPECT_EQ(s.recorded_ops, 36);
  EXPECT_EQ(s.kernels, 1);
  EXPECT_EQ(s.fused_kernels, 1);
  EXPECT_EQ(s.arena_bytes, 0u);  // no intermediate buffer at all
  Tensor e = long_chain(x);
  std::vector<double> got = y.to_vector<double>(), want = e.to_vector<double>();
  double tol = trace::fusion_tolerance(DType::float32);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << i;
}

// A chain of 16-bit ops fuses too: each step computes in float and rounds to the 16-bit type,
// as the unfused kernels do, so the fused replay gives their bits (NaN-free values here).
TEST(TraceFusion, A16BitChainBecomesOneKernelWithTheUnfusedBits) {
  auto chain = [](const Tensor& a, const Tensor& b) {
    return relu(gelu(add(mul(a, b), a), GeluApprox::tanh));
  };
  for (DType t : {DType::bfloat16, DType::float16}) {
    SCOPED_TRACE(std::string(name(t)));
    auto f = trace::function(chain, {.fusion = trace::Fusion::elementwise});
    for (int call = 0; call < 3; ++call) {
      const Tensor a = cast(randn({1000}), t), b = cast(randn({1000}), t);
      const std::vector<float> want = chain(a, b).to_vector<float>();
      EXPECT_EQ(f(a, b).to_vector<float>(), want) << call;
    }
    EXPECT_EQ(f.stats().fused_kernels, 1);
    EXPECT_EQ(f.stats().kernels, 1);
  }
}

// The op records of one call of f on x (after a first call that traced).
template <class F>
std::vector<profiler::OpRecord> profile_call(F& f, const Tensor& x) {
  f(x).wait_to_read();
  profiler::start();
  f(x).wait_to_read();
  profiler::stop();
  return profiler::ops();
}

int count_named(const std::vector<profiler::OpRecord>& ops, std::string_view name) {
  int n = 0;
  for (const auto& r : ops) n += std::string_view(r.op) == name;
  return n;
}

TEST(TraceFusion, FusedChainRunsAsOneKernelInsideTheReplaySpan) {
  auto f = trace::function(long_chain, {.fusion = trace::Fusion::elementwise});
  auto ops = profile_call(f, randn({64}));
  EXPECT_EQ(count_named(ops, "trace_replay"), 1);
  EXPECT_EQ(count_named(ops, "fused"), 1);
  EXPECT_EQ(count_named(ops, "tanh"), 0);
}

TEST(TraceFusion, UnfusedReplayShowsEveryNodeInsideTheReplaySpan) {
  auto f = trace::function([](const Tensor& x) { return exp(x) + 1.0; });
  auto ops = profile_call(f, randn({64}));
  ASSERT_EQ(count_named(ops, "trace_replay"), 1);
  const profiler::OpRecord* replay = nullptr;
  for (const auto& r : ops)
    if (std::string_view(r.op) == "trace_replay") replay = &r;
  for (std::string_view node : {"exp", "add"}) {
    ASSERT_EQ(count_named(ops, node), 1) << node;
    for (const auto& r : ops)
      if (std::string_view(r.op) == node) {
        EXPECT_GE(r.start_ns, replay->start_ns) << node;
        EXPECT_LE(r.end_ns, replay->end_ns) << node;
        EXPECT_EQ(r.stream, replay->stream) << node;
      }
  }
}

TEST(TraceFusion, LargeFusedChainsUseThePoolAndMatchEager) {
  auto g = [](const Tensor& x, const Tensor& y) {
    Tensor a = x * y + 1.0;
    Tensor b = sigmoid(a) * x;  // a and x are read twice: a small DAG
    return b - y / 2.0;
  };
  auto f = trace::function(g, {.fusion = trace::Fusion::elementwise});
  Tensor x = randn({300000}), y = randn({300000});
  EXPECT_TRUE(bitwise_equal(f(x, y), g(x, y)));
  EXPECT_EQ(f.stats().kernels, 1);
}

// An unrolled `for` of one op (y = y + 1, ...) is re-rolled inside the fused kernel: one
// entry run by the op's iterate function, with eager's bits. Covers a scalar operand, an
// operand held in another register, a unary op and a block size that is not a multiple of
// the iterate function's 16 lanes.
TEST(TraceFusion, UnrolledLoopsOfOneOpAreReRolledBitwise) {
  for (int64_t size : {7, 300}) {
    Tensor c = randn({size}) * 0.01;
    auto body = [&](const Tensor& x) {
      Tensor scale = c + 1.0;  // a register the multiplications read
      Tensor y = x * 0.5;
      for (int i = 0; i < 200; ++i) y = y + 1.0;
      for (int i = 0; i < 40; ++i) y = y * scale;
      for (int i = 0; i < 30; ++i) y = tanh(y);
      return y;
    };
    auto f = trace::function(body, {.fusion = trace::Fusion::elementwise});
    Tensor x = randn({size});
    EXPECT_TRUE(bitwise_equal(f(x), body(x))) << size;
    auto g = f.graph(x);
    ASSERT_NE(g, nullptr);
    ASSERT_EQ(g->nodes.size(), 1u);
    const trace::BoundChain& fc = *g->nodes[0].fused;
    int64_t applications = 0;
    for (const kernels::ChainStep& s : fc.steps) applications += s.repeat;
    EXPECT_EQ(applications, 272);
    EXPECT_LE(fc.steps.size(), 8u);  // scale, x * 0.5, three runs, and the written result
  }
}

TEST(TraceFusion, ValuesNeededOutsideTheRunAreWritten) {
  auto g = [](const Tensor& x) {
    Tensor a = exp(x);
    Tensor b = a + 1.0;
    Tensor s = sum(a);  // a is read by a reduction: it must exist in memory
    return std::pair<Tensor, Tensor>{b * 2.0, s};
  };
  auto f = trace::function(g, {.fusion = trace::Fusion::elementwise});
  Tensor x = randn({50});
  auto [b, s] = f(x);
  auto [eb, es] = g(x);
  EXPECT_TRUE(bitwise_equal(b, eb));
  EXPECT_TRUE(bitwise_equal(s, es));
}

TEST(TraceVerify, PassesForCorrectTracesAndReturnsTheResult) {
  auto f = trace::function(long_chain, {.fusion = trace::Fusion::elementwise, .verify = true});
  Tensor x = randn({100});
  EXPECT_TRUE(bitwise_equal(f(x), long_chain(x)));
  Tensor w = ones({4});
  auto upd = trace::function(
      [&](const Tensor& x) {
        w.sub_(x * 0.5);
        return w * 2.0;
      },
      {.verify = true});
  upd(ones({4}));
  upd(ones({4}));
  EXPECT_EQ(w.to_vector<double>(), std::vector<double>(4, 0.0));  // applied once per call
}

TEST(TraceVerify, NamesTheFirstDifferingNode) {
  // A kernel that is not a pure function of its inputs: differs between the two runs.
  int runs = 0;
  auto f = trace::function(
      [&](const Tensor& x) {
        Tensor y = x + 1.0;
        Tensor z = zeros({3});
        debug::gate(
            z, [&runs, p = z.storage()] { static_cast<float*>(p->data())[0] = float(++runs); });
        return y + z;
      },
      {.verify = true});
  std::string e;
  try {
    f(ones({3}));
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("verify: node"), std::string::npos) << e;
  EXPECT_NE(e.find("(gate"), std::string::npos) << e;
}

}  // namespace
}  // namespace tide
