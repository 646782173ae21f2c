// Parallel branches in a replay (trace::Options::streams): the dependency edges, the
// branch-parallel executor (nodes really overlap, edges are respected, errors surface at
// sync, results equal the sequential replay and eager), the planner's sharing under
// parallel branches, and the fallback to program order for aliased arguments.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "../error_of.h"
#include "core/engine/engine.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "trace/graph.h"
#include "trace/planner.h"
#include "trace/replay.h"
#include "trace/trace.h"
#include "trace_support.h"
#include "train/optimizer.h"

namespace tide {
namespace {

using test_util::error_of;
using testing::bitwise_equal;
using Clock = std::chrono::steady_clock;

// Two threads in the pool for the test, whatever the machine has.
class TraceParallelThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = num_threads();
    set_num_threads(2);
  }
  void TearDown() override { set_num_threads(saved_); }
  int saved_ = 1;
};

// A node of its own inside a traced function: an engine task whose kernel is `fn`,
// reading `reads` and writing a fresh one-element tensor (returned).
template <class F>
Tensor probe(const char* op, std::vector<Tensor> reads, F fn) {
  Tensor out = Tensor::empty(Shape{1}, DType::float32, Device::cpu(), op);
  std::vector<Storage*> r;
  for (const Tensor& t : reads) r.push_back(t.storage());
  Storage* w = out.storage();
  Engine::get().submit(Device::cpu(), op, std::span<Storage* const>(r),
                       std::span<Storage* const>(&w, 1), std::move(fn), Site::current());
  return out;
}

TEST(TraceParallel, DependenciesFollowReadsAndWrites) {
  auto f = trace::function([](const Tensor& x) {
    Tensor a = exp(x) * 2.0;   // nodes 0, 1
    Tensor b = tanh(x) + 1.0;  // nodes 2, 3
    Tensor c = a + b;          // node 4: joins the branches
    Tensor d = c * 3.0;        // node 5: reads c
    c.add_(b);                 // node 6: writes c after node 5 read it (write after read)
    return std::vector<Tensor>{c, d};
  });
  Tensor x = randn({8});
  f(x);
  auto g = f.graph(x);
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(g->nodes.size(), 7u);
  const trace::Dependencies& d = g->deps;
  EXPECT_EQ(d.successors[0], std::vector<int>{1});
  EXPECT_EQ(d.successors[1], std::vector<int>{4});
  EXPECT_EQ(d.successors[2], std::vector<int>{3});
  EXPECT_EQ(d.successors[3], (std::vector<int>{4, 6}));
  EXPECT_EQ(d.successors[4], (std::vector<int>{5, 6}));
  EXPECT_EQ(d.successors[5], std::vector<int>{6});
  EXPECT_EQ(d.predecessors, (std::vector<int>{0, 1, 0, 1, 2, 1, 3}));
  EXPECT_EQ(d.critical_path, 5);
  EXPECT_EQ(f.stats().critical_path, 5);
}

// Four towers of small matmuls, tanh and random noise, joined at the end.
std::vector<Tensor> towers(const Tensor& x, const std::vector<Tensor>& w) {
  std::vector<Tensor> outs;
  Tensor total;
  for (size_t t = 0; t < w.size(); ++t) {
    Tensor h = x;
    for (int layer = 0; layer < 4; ++layer) h = tanh(matmul(h, w[t]) + 0.1 * double(t));
    h = h + randn(h.shape()) * 0.01;
    outs.push_back(h);
    total = total.defined() ? total + h : h;
  }
  outs.push_back(sum(total));
  return outs;
}

TEST_F(TraceParallelThreads, ParallelReplayEqualsSequentialAndEager) {
  std::vector<Tensor> w;
  for (int t = 0; t < 4; ++t) w.push_back(randn({16, 16}) * 0.3);
  Tensor x = randn({8, 16});
  for (trace::Fusion fusion : {trace::Fusion::none, trace::Fusion::elementwise}) {
    auto body = [&](const Tensor& in) { return towers(in, w); };
    auto seq = trace::function(body, {.name = "seq", .fusion = fusion});
    auto par = trace::function(body, {.name = "par", .fusion = fusion, .streams = 2});
    for (int call = 0; call < 4; ++call) {
      manual_seed(100 + uint64_t(call));
      std::vector<Tensor> p = par(x);
      manual_seed(100 + uint64_t(call));
      std::vector<Tensor> s = seq(x);
      manual_seed(100 + uint64_t(call));
      std::vector<Tensor> e = towers(x, w);
      ASSERT_EQ(p.size(), e.size());
      for (size_t i = 0; i < p.size(); ++i) {
        EXPECT_TRUE(bitwise_equal(p[i], s[i])) << "call " << call << ", output " << i;
        if (fusion == trace::Fusion::none)
          EXPECT_TRUE(bitwise_equal(p[i], e[i])) << "call " << call << ", output " << i;
      }
    }
    EXPECT_LT(par.stats().critical_path * 2, par.stats().kernels);
  }
}

// Issue 11 item 8: the pool threads of a parallel replay record their nodes on the
// replay's stream at the same time as its worker. Every node's record must arrive whole
// (TSan reported the unlocked append; records were lost or malformed).
TEST_F(TraceParallelThreads, ProfilerRecordsEveryNodeOfAParallelReplay) {
  std::vector<Tensor> w;
  for (int t = 0; t < 4; ++t) w.push_back(randn({8, 8}) * 0.3);
  Tensor x = randn({4, 8});
  auto par = trace::function([&](const Tensor& in) { return towers(in, w); },
                             {.name = "par", .fusion = trace::Fusion::none, .streams = 2});
  par(x);  // warm-up and capture, not profiled
  par(x);
  const int calls = 30;
  profiler::start();
  for (int call = 0; call < calls; ++call) par(x);
  Engine::get().synchronize();  // nodes are recorded only while the profiler is on
  profiler::stop();
  const std::vector<profiler::OpRecord> ops = profiler::ops();
  size_t tanh_records = 0;
  for (const profiler::OpRecord& r : ops) {
    ASSERT_NE(r.op, nullptr);
    EXPECT_LE(r.start_ns, r.end_ns) << r.op;
    if (std::string_view(r.op) == "tanh") ++tanh_records;
  }
  EXPECT_EQ(tanh_records, size_t(calls) * w.size() * 4);  // 4 towers x 4 layers per call
}

// Two independent nodes that each wait for the other to start: they finish only when a
// replay runs them at the same time.
TEST_F(TraceParallelThreads, IndependentBranchesRunAtTheSameTime) {
  auto overlap_run = [](int streams, std::chrono::milliseconds patience) {
    auto arrived = std::make_shared<std::atomic<int>>(0);
    auto met = std::make_shared<std::atomic<int>>(0);
    auto meet = [=] {
      arrived->fetch_add(1);
      auto until = Clock::now() + patience;
      while (arrived->load() < 2 && Clock::now() < until) std::this_thread::yield();
      if (arrived->load() >= 2) met->fetch_add(1);
    };
    auto f = trace::function(
        [&] {
          return std::vector<Tensor>{probe("left", {}, meet), probe("right", {}, meet)};
        },
        {.name = "branches", .streams = streams});
    f();  // traces; the replay runs the two probes
    wait_all();
    return met->load();
  };
  EXPECT_EQ(overlap_run(2, std::chrono::seconds(20)), 2);
  // The control: in program order the first probe gives up waiting for the second.
  EXPECT_EQ(overlap_run(1, std::chrono::milliseconds(50)), 1);
}

TEST_F(TraceParallelThreads, EdgesAreRespected) {
  // Each probe notes when it started and ended on one clock of tickets; successors must
  // start after their predecessors ended, whatever the threads do.
  struct Log {
    std::atomic<int> ticket{0};
    int start[6] = {}, end[6] = {};
  };
  auto log = std::make_shared<Log>();
  auto node = [log](int id) {
    return [log, id] {
      log->start[id] = log->ticket.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200 * (id % 3)));
      log->end[id] = log->ticket.fetch_add(1);
    };
  };
  auto f = trace::function(
      [&] {
        Tensor a = probe("a", {}, node(0));
        Tensor b = probe("b", {a}, node(1));
        Tensor c = probe("c", {}, node(2));
        Tensor d = probe("d", {c}, node(3));
        Tensor e = probe("e", {b, d}, node(4));
        Tensor h = probe("h", {a, c}, node(5));
        return std::vector<Tensor>{e, h};
      },
      {.name = "edges", .streams = 2});
  const std::vector<std::pair<int, int>> edges{{0, 1}, {2, 3}, {1, 4}, {3, 4}, {0, 5}, {2, 5}};
  for (int call = 0; call < 30; ++call) {
    f();
    wait_all();
    for (auto [p, s] : edges)
      ASSERT_LT(log->end[p], log->start[s]) << "call " << call << ": " << p << " -> " << s;
  }
}

TEST_F(TraceParallelThreads, ErrorsSurfaceAtSyncNamingTheLowestFailingNode) {
  auto fail = std::make_shared<std::atomic<bool>>(true);
  auto f = trace::function(
      [&] {
        Tensor a =
            probe("slow", {}, [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
        Tensor b = probe("first_failure", {}, [fail] {
          if (fail->load()) throw std::runtime_error("left branch broke");
        });
        Tensor c = probe("second_failure", {}, [fail] {
          if (fail->load()) throw std::runtime_error("right branch broke");
        });
        Tensor d = probe("after", {b, c}, [] {});
        return std::vector<Tensor>{a, d};
      },
      {.name = "failing", .streams = 2});
  std::vector<Tensor> out = f();
  std::string msg = error_of([&] { out[1].wait_to_read(); });
  EXPECT_NE(msg.find("node 1 of 4 (first_failure"), std::string::npos) << msg;
  EXPECT_NE(msg.find("left branch broke"), std::string::npos) << msg;
  try {
    wait_all();
  } catch (const Error&) {
  }
  // The engine and the function stay usable.
  fail->store(false);
  out = f();
  EXPECT_NO_THROW(out[1].wait_to_read());
  EXPECT_NO_THROW(wait_all());
}

TEST(TraceParallel, PlannerSharesOnlyBetweenOrderedValues) {
  // Two branches recorded one after the other: in program order the second reuses the
  // first's dead buffers; run in parallel they may be alive together.
  auto body = [](const Tensor& x) {
    Tensor a = x, b = x;
    for (int i = 0; i < 4; ++i) a = exp(a * 0.5);
    for (int i = 0; i < 4; ++i) b = tanh(b * 0.5);
    return a + b;
  };
  auto seq = trace::function(body, {.name = "seq"});
  auto par = trace::function(body, {.name = "par", .streams = 2});
  Tensor x = randn({256});
  EXPECT_TRUE(bitwise_equal(seq(x), par(x)));
  auto gs = seq.graph(x), gp = par.graph(x);
  ASSERT_TRUE(gs && gp);
  EXPECT_EQ(trace::check_plan(*gs), "");
  EXPECT_EQ(trace::check_plan(*gp), "");
  EXPECT_GT(par.stats().arena_bytes, seq.stats().arena_bytes);
  // The sequential plan's offsets are wrong for parallel branches: the check says so.
  ASSERT_EQ(gs->values.size(), gp->values.size());
  for (size_t i = 0; i < gp->values.size(); ++i) gp->values[i].offset = gs->values[i].offset;
  gp->arena_bytes = gs->arena_bytes;
  EXPECT_NE(trace::check_plan(*gp).find("no dependency orders them"), std::string::npos);
}

TEST(TraceParallel, AliasedArgumentsRunInProgramOrder) {
  Tensor w = ones({4});
  auto f = trace::function(
      [&](Tensor a, const Tensor& b) {
        a.mul_(2.0);   // an input written in place...
        return b * w;  // ...and another input read: independent unless they alias
      },
      {.name = "alias", .streams = 2});
  Tensor x = zeros({4}), y = zeros({4});
  f(x, y);
  auto g = f.graph(x, y);
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(trace::prepare_call(*g, std::vector<Tensor>{x, y}).in_order);
  EXPECT_TRUE(trace::prepare_call(*g, std::vector<Tensor>{x, x}).in_order);
  EXPECT_TRUE(trace::prepare_call(*g, std::vector<Tensor>{w, y}).in_order);  // aliases a capture
  for (int i = 0; i < 20; ++i) {
    Tensor s = ones({4});
    Tensor r = f(s, s);  // eager: s *= 2, then s * w
    EXPECT_EQ(r.to_vector<float>(), std::vector<float>(4, 2.0f));
  }
}

TEST_F(TraceParallelThreads, TrainingStepWithParallelBranchesMatchesEager) {
  auto make = [] {
    Generator gen(5);
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::Linear>(nn::LinearOptions(10, 24), gen));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(nn::LinearOptions(24, 1), gen));
    return m;
  };
  auto me = make(), mt = make();
  train::Adam oe(me->parameters(), train::AdamOptions(0.01)),
      ot(mt->parameters(), train::AdamOptions(0.01));
  auto step = [](nn::Sequential& m, train::Optimizer& o, const Tensor& x, const Tensor& y) {
    o.zero_grad();
    Tensor loss = nn::l2_loss(m.forward(x), y);
    loss.backward();
    o.step();
    return loss;
  };
  auto f = trace::function([&](const Tensor& x, const Tensor& y) { return step(*mt, ot, x, y); },
                           {.name = "step", .warmup_calls = 1, .streams = 2});
  Generator data(8);
  for (int i = 0; i < 10; ++i) {
    Tensor x = randn({16, 10}, DType::float32, data), y = randn({16, 1}, DType::float32, data);
    ASSERT_TRUE(bitwise_equal(step(*me, oe, x, y), f(x, y))) << "step " << i;
  }
  auto pe = me->parameters(), pt = mt->parameters();
  for (size_t i = 0; i < pe.size(); ++i) EXPECT_TRUE(bitwise_equal(pe[i], pt[i])) << i;
  auto s = f.stats();
  EXPECT_LT(s.critical_path, s.kernels);  // the parameter updates are independent
}

TEST(TraceParallel, StreamsMustBePositive) {
  EXPECT_NE(error_of([] {
              trace::function([](const Tensor& x) { return x; }, {.streams = 0});
            }).find("streams must be >= 1"),
            std::string::npos);
}

}  // namespace
}  // namespace tide
