// The GPU trace executor (trace/device_graph.h) on a recording fake of a GPU: the CUDA
// graph built for a trace has one captured node per planned node, the trace's dependency
// edges, a copy node per input before the roots and per output after the sinks; replays
// equal eager; outputs stay fresh over many replays; nothing allocates during capture (the
// fake refuses it as CUDA does); a refused capture falls back to launching the nodes one
// by one and the stats say why; replays on two streams do not share the arena unordered;
// a retrace after an eviction updates the evicted exec in place; what is not supported yet
// on a GPU is refused with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <utility>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/engine.h"
#include "core/rng.h"
#include "fake_gpu.h"
#include "ops/ops.h"
#include "tests/error_of.h"
#include "tests/train_rig.h"
#include "trace/device_graph.h"
#include "trace/device_loop.h"
#include "trace/trace.h"
#include "trace_support.h"

namespace tide {
namespace {

using cuda::FakeDevice;
using test_util::error_of;

constexpr int kGpu = 8;
Device gpu() {
  test_util::fake_gpu(kGpu);
  return Device::cuda(kGpu);
}
FakeDevice& fake() { return test_util::fake_gpu(kGpu); }

Tensor on_gpu(std::vector<float> v, std::vector<int64_t> shape) {
  return from_vector(v, Shape(std::move(shape)), gpu());
}

std::vector<float> values(int n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = scale * float((i * 7) % 11 - 5);
  return v;
}

// A loop body: one elementwise chain on the state.
Tensor step(const Tensor& s) { return s * 1.5 - 0.25; }

// Two branches (matmul, and an elementwise chain) joined at the end.
std::vector<Tensor> branches(const Tensor& x, const Tensor& w) {
  Tensor h = relu(matmul(x, w) + 1.0);
  Tensor e = x * 0.5 - 2.0;
  return {h * 2.0, sum(e, 1) + sum(h, 1)};
}

TEST(DeviceGraph, ReplaysEqualEagerAndTheGraphHasTheTracesShape) {
  auto f = trace::function(branches, {.name = "branches"});
  for (int call = 0; call < 3; ++call) {
    Tensor x = on_gpu(values(12, 0.25f * float(call + 1)), {3, 4});
    Tensor w = on_gpu(values(20, 0.1f), {4, 5});
    std::vector<Tensor> traced = f(x, w), eager = branches(x, w);
    ASSERT_EQ(traced.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(traced[k].device(), gpu());
      EXPECT_EQ(traced[k].to_vector<float>(), eager[k].to_vector<float>()) << "call " << call;
    }
  }
  Tensor x = on_gpu(values(12, 1), {3, 4}), w = on_gpu(values(20, 1), {4, 5});
  std::shared_ptr<trace::Graph> g = f.graph(x, w);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->device, gpu());
  trace::FunctionStats s = f.stats();
  EXPECT_EQ(s.graph_fallback, "");
  EXPECT_GE(s.graph_bytes, x.nbytes() + w.nbytes()) << "fixed buffers for the inputs";
  const size_t n = g->nodes.size(), inputs = g->inputs.size(), outputs = 2;
  EXPECT_EQ(s.graph_nodes, inputs + n + outputs);

  FakeDevice::GraphShape shape = fake().graph_shape(g->device_graph->exec);
  EXPECT_EQ(shape.kinds,
            std::string(inputs, 'm') + std::string(n, 'k') + std::string(outputs, 'm'));
  std::set<std::pair<int, int>> edges(shape.edges.begin(), shape.edges.end()), expected;
  std::vector<bool> root(n, true), sink(n, true);
  for (size_t i = 0; i < n; ++i)
    for (int j : g->deps.successors[i]) {
      expected.insert({int(inputs + i), int(inputs) + j});  // the trace's edges, one for one
      root[size_t(j)] = false;
      sink[i] = false;
    }
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < inputs && root[i]; ++k) expected.insert({int(k), int(inputs + i)});
    for (size_t o = 0; o < outputs && sink[i]; ++o)
      expected.insert({int(inputs + i), int(inputs + n + o)});
  }
  EXPECT_EQ(edges, expected);
  EXPECT_LT(std::count(root.begin(), root.end(), true), int64_t(n)) << "the trace has edges";
}

// Independent nodes run at once in a CUDA graph and share its one workspace: each node
// that used it (cuBLASLt, CUB, cuDNN; here kernels that ask for bytes of it) waits for the
// previous one; the others, a library call whose algorithm needs no bytes among them, keep
// only the trace's edges. Without this, an MLP step traced on an H100 gave a different loss
// on every run.
TEST(DeviceGraph, NodesUsingTheWorkspaceAreOrderedOthersRunFree) {
  gpu();
  trace::Graph g;
  g.device = gpu();
  const bool uses[] = {true, false, true, true, false};
  for (bool u : uses) {
    trace::Node node;
    node.op = u ? "uses_workspace" : "plain";
    node.kernel = [u](const KernelContext& c) {
      EXPECT_EQ(use_workspace(c, u ? 16 : 0) != nullptr, u);
    };
    g.nodes.push_back(std::move(node));
  }
  // The trace's own edges: 1 -> 3 (node 3 also follows 2, the previous workspace user).
  g.deps.successors = {{}, {3}, {}, {}, {}};
  g.deps.predecessors = {0, 0, 0, 1, 0};
  std::vector<unsigned char> workspace(64);
  KernelContext ctx{gpu()};
  ctx.api = &fake();
  ctx.workspace = workspace.data();
  ctx.workspace_bytes = workspace.size();
  cuda::GraphHandle h = fake().graph_create();
  std::vector<cuda::GraphNodeHandle> sinks;
  EXPECT_EQ(trace::add_planned_nodes(g, h, {}, ctx, &sinks), "");
  FakeDevice::GraphShape shape = fake().graph_shape(h);
  fake().graph_destroy(h);
  EXPECT_EQ(shape.kinds, "kkkkk");
  std::set<std::pair<int, int>> edges(shape.edges.begin(), shape.edges.end());
  EXPECT_EQ(edges, (std::set<std::pair<int, int>>{{0, 2}, {1, 3}, {2, 3}}));
  EXPECT_EQ(sinks.size(), 4u) << "the sinks are the trace's (nodes 0, 2, 3, 4)";
}

TEST(DeviceGraph, OutputsStayFreshOverManyReplaysAndTheGraphIsBuiltOnce) {
  auto f = trace::function([](const Tensor& x) { return x * 3.0 + 1.0; });
  Tensor first = f(on_gpu({1, 2, 3}, {3}));
  first.wait_to_read();  // the first replay built the graph
  const size_t instantiations = fake().count(FakeDevice::CallKind::graph_instantiate);
  std::vector<Tensor> kept;
  for (int i = 0; i < 50; ++i) kept.push_back(f(on_gpu({float(i), 0, -1}, {3})));
  EXPECT_EQ(first.to_vector<float>(), (std::vector<float>{4, 7, 10}));
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(kept[size_t(i)].to_vector<float>(), (std::vector<float>{3.0f * float(i) + 1, 1, -2}))
        << "replay " << i;
  EXPECT_EQ(fake().count(FakeDevice::CallKind::graph_instantiate), instantiations)
      << "later calls re-point the copy nodes; they never instantiate again";
  EXPECT_GE(fake().count(FakeDevice::CallKind::graph_set_memcpy), 50u * 2);
}

// A function cycling through more shapes than its cache keeps: each new signature's graph
// has the topology of the one it evicted, so it takes that exec and updates it in place
// (cudaGraphExecUpdate) instead of instantiating; its copies are then re-pointed through
// the exec's own graph (the fake refuses a node of a destroyed graph, as CUDA does), and
// every call still gets fresh, right outputs. A graph of another topology is refused the
// update and instantiated.
TEST(DeviceGraph, AnEvictedSignaturesGraphIsUpdatedInPlaceForTheNextOne) {
  auto f = trace::function([](const Tensor& x) { return x * 3.0 + 1.0; }, {.cache_budget = 1});
  const size_t updates_before = fake().count(FakeDevice::CallKind::graph_update);
  std::vector<Tensor> kept;
  std::vector<std::vector<float>> want;
  for (int call = 0; call < 8; ++call) {
    std::vector<float> v(size_t(2 + call % 2), float(call));  // shapes {2}, {3}, {2}, ...
    for (int again = 0; again < 2; ++again) {                 // a second call re-points the copies
      kept.push_back(f(on_gpu(v, {int64_t(v.size())})));
      want.emplace_back(v.size(), 3.0f * float(call) + 1);
    }
    kept.back().wait_to_read();  // the evicted graph goes before the next trace
  }
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(kept[i].to_vector<float>(), want[i]) << i;
  trace::FunctionStats s = f.stats();
  EXPECT_EQ(s.traces, 8);
  EXPECT_EQ(s.evictions, 7);
  EXPECT_EQ(s.graph_instantiations + s.graph_updates, 8);
  EXPECT_GE(s.graph_updates, 6) << "each retrace after the first eviction updates a spare";
  EXPECT_GE(fake().count(FakeDevice::CallKind::graph_update) - updates_before,
            size_t(s.graph_updates));
  EXPECT_EQ(s.graph_fallback, "");

  // Another topology (one more node): CUDA refuses the update, the graph is instantiated.
  auto g = trace::function([](const Tensor& x) { return x.numel() > 2 ? x * 3.0 + 1.0 : x * 3.0; },
                           {.cache_budget = 1});
  g(on_gpu({1, 2}, {2})).wait_to_read();
  Tensor three = g(on_gpu({1, 2, 3}, {3}));
  EXPECT_EQ(three.to_vector<float>(), (std::vector<float>{4, 7, 10}));
  EXPECT_EQ(g.stats().graph_updates, 0);
  EXPECT_EQ(g.stats().graph_instantiations, 2);

  // A loop's graph is instantiated: CUDA does not change a WHILE node's parameters, and
  // each build makes new condition handles (an update would leave the old ones in place).
  auto h = trace::function([](const Tensor& x) { return trace::loop(3, step, x); },
                           {.cache_budget = 1, .loop_unroll = 1});
  for (int call = 0; call < 4; ++call) {
    const int n = 2 + call % 2;
    Tensor x = on_gpu(values(n, 1), {n});
    EXPECT_EQ(h(x).to_vector<float>(), trace::loop(3, step, x).to_vector<float>()) << call;
  }
  EXPECT_EQ(h.stats().graph_updates, 0);
  EXPECT_EQ(h.stats().graph_instantiations, 4);

  // So a loop's exec is never kept as a spare: signatures alternating between a loop and
  // plain ops still update the plain graph's spare, not a loop's that no update can use.
  auto mixed = [](const Tensor& x) {
    return x.numel() == 3 ? trace::loop(3, step, x) : x * 3.0 + 1.0;
  };
  auto m = trace::function(mixed, {.cache_budget = 1});
  for (int call = 0; call < 8; ++call) {
    const int n = call % 2 ? 3 : 2;  // plain, loop, plain, loop, ...
    Tensor x = on_gpu(values(n, float(call + 1)), {n});
    EXPECT_EQ(m(x).to_vector<float>(), mixed(x).to_vector<float>()) << call;
  }
  EXPECT_EQ(m.stats().graph_updates, 3) << "each plain signature after the first";
  EXPECT_EQ(m.stats().graph_instantiations, 5);
}

// CUDA refuses zero-length copy nodes (and so does the fake): an empty input or output
// gets none, and its replays still work.
TEST(DeviceGraph, EmptyInputsAndOutputsGetNoCopyNodes) {
  auto f = trace::function([](const Tensor& e, const Tensor& x) {
    return std::vector<Tensor>{e * 2.0, x + sum(e, 0)};
  });
  for (int call = 0; call < 4; ++call) {
    Tensor e = zeros({0, 3}, DType::float32, gpu());
    Tensor x = on_gpu({float(call), 1, 2}, {3});
    std::vector<Tensor> out = f(e, x);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].shape(), Shape({0, 3}));
    EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{float(call), 1, 2})) << call;
  }
  EXPECT_EQ(f.stats().graph_fallback, "");
  EXPECT_GT(f.stats().graph_nodes, 0u);
}

// An argument no node reads or writes is not declared to the engine, which does not keep
// it alive for the replay: it gets no copy node, and its replays never touch it.
TEST(DeviceGraph, AnArgumentNoNodeUsesGetsNoCopyNode) {
  auto f = trace::function([](const Tensor& x, const Tensor&) { return x * 2.0; });
  for (int call = 0; call < 3; ++call) {
    Tensor x = on_gpu({float(call), 1}, {2});
    EXPECT_EQ(f(x, on_gpu({7, 7, 7}, {3})).to_vector<float>(),
              (std::vector<float>{2.0f * float(call), 2}));
  }
  Tensor x = on_gpu({1, 2}, {2}), unused = on_gpu({7, 7, 7}, {3});
  EXPECT_EQ(fake().graph_shape(f.graph(x, unused)->device_graph->exec).kinds, "mkm")
      << "a copy in for x, its kernel, a copy out";
  EXPECT_EQ(f.stats().graph_fallback, "");
}

TEST(DeviceGraph, ARefusedCaptureLaunchesTheNodesOneByOneAndSaysWhy) {
  auto body = [](const Tensor& x) { return exp(x * 0.5) - 1.0; };
  auto f = trace::function(body, {.name = "refused"});
  fake().refuse_next_capture("a launch this fake will not capture");
  Tensor x = on_gpu({0, 1, 2, 3}, {4});
  Tensor y = f(x);
  EXPECT_EQ(y.to_vector<float>(), body(x).to_vector<float>());
  trace::FunctionStats s = f.stats();
  EXPECT_EQ(s.graph_nodes, 0u);
  EXPECT_NE(s.graph_fallback.find("CUDA refused to capture node 0"), std::string::npos)
      << s.graph_fallback;
  EXPECT_NE(s.graph_fallback.find("will not capture"), std::string::npos) << s.graph_fallback;
  Tensor x2 = on_gpu({4, 5, 6, 7}, {4});
  EXPECT_EQ(f(x2).to_vector<float>(), body(x2).to_vector<float>()) << "and keeps doing so";
}

// An argument the function writes in place is the caller's tensor, as in eager: the write
// reaches it, and reads through another argument or a capture that aliases it see it.
TEST(DeviceGraph, ArgumentsWrittenInPlaceReachTheCaller) {
  auto scale = [](Tensor a) {
    a.mul_(2.0);
    return a + 1.0;
  };
  auto f = trace::function(scale, {.name = "in place"});
  for (int call = 0; call < 3; ++call) {
    Tensor x = on_gpu({1, 2, 3, 4}, {4}), e = on_gpu({1, 2, 3, 4}, {4});
    Tensor r = f(x), re = scale(e);
    EXPECT_EQ(r.to_vector<float>(), re.to_vector<float>()) << call;
    EXPECT_EQ(x.to_vector<float>(), e.to_vector<float>())
        << "the argument is written, call " << call;
  }
  auto twice = trace::function([](Tensor a) { return a.mul_(2.0); }, {.name = "returns it"});
  Tensor z = on_gpu({1, 2, 3, 4}, {4});
  for (int call = 0; call < 2; ++call) twice(z);
  Tensor back = twice(z);  // the argument itself, written in place
  EXPECT_EQ(back.storage(), z.storage());
  EXPECT_EQ(back.to_vector<float>(), (std::vector<float>{8, 16, 24, 32}));
  EXPECT_EQ(twice.stats().graph_fallback, "");

  Tensor w = on_gpu({1, 1, 1, 1}, {4});
  auto g = trace::function(
      [&](Tensor a, const Tensor& b) {
        a.mul_(2.0);   // an input written in place...
        return b * w;  // ...and another input read: the same tensor when they alias
      },
      {.name = "alias"});
  for (int call = 0; call < 3; ++call) {
    Tensor s = on_gpu({1, 1, 1, 1}, {4});
    Tensor r = g(s, s);  // eager: s *= 2, then s * w
    EXPECT_EQ(r.to_vector<float>(), std::vector<float>(4, 2.0f)) << call;
    EXPECT_EQ(s.to_vector<float>(), std::vector<float>(4, 2.0f)) << call;
  }
  Tensor y = on_gpu({3, 3, 3, 3}, {4});
  Tensor r = g(w, y);  // a writes the captured w that b * w reads
  EXPECT_EQ(r.to_vector<float>(), std::vector<float>(4, 6.0f));
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 2.0f));
  trace::FunctionStats s = g.stats();
  EXPECT_EQ(s.aliased_calls, 4) << "aliased calls run eagerly";
  Tensor p = on_gpu({1, 2, 3, 4}, {4}), q = on_gpu({5, 5, 5, 5}, {4});
  EXPECT_EQ(g(p, q).to_vector<float>(), std::vector<float>(4, 10.0f));
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_EQ(g.stats().aliased_calls, 4) << "and the others replay the graph";
  EXPECT_EQ(g.stats().graph_fallback, "");
  EXPECT_EQ(f.stats().aliased_calls, 0);
  EXPECT_EQ(f.stats().replays, 3);
}

// Host data made inside the function on its GPU (from_vector, from_data): its trace-time
// bytes are copied into the value on every replay, as eager copies them on every call
// (so an in-place write to it does not carry over to the next call).
TEST(DeviceGraph, HostDataMadeOnTheGpuInsideTheFunctionEqualsEager) {
  auto body = [](const Tensor& x) {
    Tensor c = from_vector<float>({1, 2}, Shape({2}), x.device());
    c.add_(x);
    Tensor d = from_data({0.5, 0.25}, Shape({2}), DType::float32, x.device());
    return c * d;
  };
  for (trace::Fusion fusion : {trace::Fusion::none, trace::Fusion::elementwise}) {
    auto f = trace::function(body, {.fusion = fusion});
    for (int call = 0; call < 3; ++call) {
      Tensor x = on_gpu({float(call), 10}, {2});
      EXPECT_EQ(f(x).to_vector<float>(), body(x).to_vector<float>()) << call;
    }
    EXPECT_EQ(f.stats().graph_fallback, "");
  }
  // Made from a CPU tensor an op wrote, the copy is still refused, and says what to do.
  auto g = trace::function([](const Tensor& x) { return (ones({2}) * 2.0).to(x.device()) + x; });
  std::string e = error_of([&] { g(on_gpu({1, 2}, {2})); });
  EXPECT_NE(e.find("a trace runs on one device"), std::string::npos) << e;
  EXPECT_NE(e.find("from_vector(values, shape, device)"), std::string::npos) << e;
}

TEST(DeviceGraph, ReplaysOnTwoStreamsAreOrderedOnTheArena) {
  // Long enough that the replays overlap if nothing orders them: every replay writes the
  // same arena and fixed buffers.
  auto body = [](const Tensor& x) {
    Tensor y = x;
    for (int i = 0; i < 20; ++i) y = y * 1.5 - 0.25;
    return y;
  };
  auto f = trace::function(body);
  Stream a = Stream::create(gpu()), b = Stream::create(gpu());
  std::vector<Tensor> ins, outs;
  for (int i = 0; i < 20; ++i) {
    StreamGuard on(i % 2 ? a : b);
    ins.push_back(on_gpu({float(i), float(-i)}, {2}));
    outs.push_back(f(ins.back()));
  }
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(outs[size_t(i)].to_vector<float>(), body(ins[size_t(i)]).to_vector<float>()) << i;
}

// The whole training step (forward, loss, backward, optimizer update) as one CUDA graph:
// losses and parameters after 12 steps equal eager's on the same device.
using test_util::train_step;

test_util::TrainRig make_rig(bool adam) {
  return test_util::make_rig({.sizes = {12, 32, 1},
                              .device = gpu(),
                              .adam = adam,
                              .lr = adam ? 0.01 : 0.05,
                              .momentum = 0.9});
}

void check_training(bool adam) {
  test_util::TrainRig eager = make_rig(adam), traced = make_rig(adam);
  auto f =
      trace::function([&](const Tensor& x, const Tensor& y) { return train_step(traced, x, y); },
                      {.name = "train_step", .warmup_calls = 1});
  Generator data(3);
  for (int i = 0; i < 12; ++i) {
    Tensor x = randn({24, 12}, DType::float32, data, gpu());
    Tensor y = randn({24, 1}, DType::float32, data, gpu());
    Tensor le = train_step(eager, x, y), lt = f(x, y);
    ASSERT_EQ(le.to_vector<float>(), lt.to_vector<float>()) << "loss at step " << i;
  }
  auto pe = eager.model->named_parameters(), pt = traced.model->named_parameters();
  ASSERT_EQ(pe.size(), pt.size());
  for (size_t i = 0; i < pe.size(); ++i)
    EXPECT_EQ(pe[i].second.to_vector<float>(), pt[i].second.to_vector<float>()) << pe[i].first;
  trace::FunctionStats s = f.stats();
  EXPECT_EQ(s.replays, 11);
  EXPECT_EQ(s.graph_fallback, "");
  EXPECT_GT(s.graph_nodes, size_t(s.kernels));
}

TEST(DeviceGraph, TrainingStepWithSgdMomentumEqualsEager) { check_training(false); }
TEST(DeviceGraph, TrainingStepWithAdamEqualsEager) { check_training(true); }

TEST(DeviceGraph, MixingDevicesInOneTraceIsRefusedClearly) {
  Tensor x = on_gpu({1, 2}, {2});
  auto mixed = trace::function([](const Tensor& t) { return t.to(Device::cpu()) + ones({2}); });
  std::string e = error_of([&] { (void)mixed(x); });
  EXPECT_NE(e.find("a trace runs on one device"), std::string::npos) << e;
  // Too many random ops in one GPU loop body for the loop kernels' parameters.
  auto many = trace::function([](const Tensor& t) {
    return trace::loop(
        2,
        [](const Tensor& s) {
          Tensor y = s;
          for (int i = 0; i < 9; ++i)
            y = y + rand({2}, DType::float32, default_generator(), s.device());
          return y;
        },
        t);
  });
  e = error_of([&] { (void)many(x); });
  EXPECT_NE(e.find("the body has 9 random ops; a traced loop on a GPU takes at most 8"),
            std::string::npos)
      << e;
}

// Random ops read their counters from device memory each replay writes: a replay draws
// what eager draws with the same generator, and new numbers every call.
TEST(DeviceGraph, RandomOpsDrawWhatEagerDrawsAndNewNumbersEveryReplay) {
  Generator traced_gen(21), eager_gen(21);
  auto body = [](Generator& gen) {
    return [&gen](const Tensor& x) {
      Tensor noise = randn({2, 3}, DType::float32, gen, x.device());
      return x * rand({2, 3}, DType::float32, gen, x.device()) + noise;
    };
  };
  auto f = trace::function(body(traced_gen));
  auto eager = body(eager_gen);
  Tensor x = on_gpu(values(6, 1), {2, 3});
  std::vector<float> previous;
  for (int call = 0; call < 4; ++call) {
    std::vector<float> got = f(x).to_vector<float>();
    EXPECT_EQ(got, eager(x).to_vector<float>()) << "call " << call;
    EXPECT_NE(got, previous) << "call " << call << " drew the previous call's numbers";
    previous = got;
  }
  EXPECT_EQ(f.stats().graph_fallback, "");
  EXPECT_EQ(f.stats().traces, 1);
  // In the node-by-node fallback too.
  auto g = trace::function(body(traced_gen));
  fake().refuse_next_capture("fallback");
  for (int call = 0; call < 2; ++call)
    EXPECT_EQ(g(x).to_vector<float>(), eager(x).to_vector<float>()) << "fallback call " << call;
}

TEST(DeviceGraph, ATrainingStepWithDropoutEqualsEager) {
  Generator eager_drop(99), traced_drop(99);
  auto rig = [&](Generator& drop) {
    return test_util::make_rig(
        {.sizes = {8, 16, 1}, .device = gpu(), .dropout = 0.25, .dropout_gen = &drop});
  };
  test_util::TrainRig eager = rig(eager_drop), traced = rig(traced_drop);
  auto f =
      trace::function([&](const Tensor& x, const Tensor& y) { return train_step(traced, x, y); },
                      {.name = "dropout_step", .warmup_calls = 1});
  Generator data(5);
  for (int i = 0; i < 6; ++i) {
    Tensor x = randn({12, 8}, DType::float32, data, gpu());
    Tensor y = randn({12, 1}, DType::float32, data, gpu());
    ASSERT_EQ(train_step(eager, x, y).to_vector<float>(), f(x, y).to_vector<float>()) << i;
  }
  auto pe = eager.model->named_parameters(), pt = traced.model->named_parameters();
  for (size_t i = 0; i < pe.size(); ++i)
    EXPECT_EQ(pe[i].second.to_vector<float>(), pt[i].second.to_vector<float>()) << pe[i].first;
  EXPECT_EQ(f.stats().graph_fallback, "");
}

// verify = true on a GPU: the node-by-node launch against the graph, same bindings.
TEST(DeviceGraph, VerifyPassesForCorrectTracesAndAppliesUpdatesOnce) {
  auto f = trace::function(branches, {.name = "verified", .verify = true});
  Tensor x = on_gpu(values(12, 0.5f), {3, 4}), w = on_gpu(values(20, 0.1f), {4, 5});
  for (int call = 0; call < 2; ++call) {
    std::vector<Tensor> traced = f(x, w), eager = branches(x, w);
    for (size_t k = 0; k < 2; ++k)
      EXPECT_EQ(traced[k].to_vector<float>(), eager[k].to_vector<float>()) << call;
  }
  Tensor p = on_gpu({4, 4}, {2});
  Generator gen(8);
  auto upd = trace::function(
      [&](const Tensor& d) {
        p.sub_(d * rand({2}, DType::float32, gen, d.device()));
        return p * 2.0;
      },
      {.verify = true});
  Generator twin(8);
  std::vector<float> want = {4, 4};
  for (int call = 0; call < 3; ++call) {
    std::vector<float> r = rand({2}, DType::float32, twin, gpu()).to_vector<float>();
    for (size_t i = 0; i < 2; ++i) want[i] -= 1.0f * r[i];
    EXPECT_EQ(upd(on_gpu({1, 1}, {2})).to_vector<float>(),
              (std::vector<float>{2 * want[0], 2 * want[1]}));
    EXPECT_EQ(p.to_vector<float>(), want) << "applied once per call, call " << call;
  }
  EXPECT_EQ(upd.stats().graph_fallback, "");
}

TEST(DeviceGraph, VerifyNamesTheNodeThatLastWroteTheFirstDifferingValue) {
  // A kernel that is not a pure function of its inputs: it writes a different value into
  // a persistent tensor each time it runs (a host function in stream order on the fake,
  // captured into the graph), so the two launches differ there first.
  std::atomic<int> runs = 0;
  Tensor state = on_gpu({0, 0, 0}, {3});
  auto f = trace::function(
      [&](const Tensor& x) {
        Storage* s = state.storage();
        Engine::get().submit(
            gpu(), "impure", {s}, {s},
            [&runs, s](const KernelContext& ctx) {
              cuda::launch_host(ctx,
                                [&runs, s] { static_cast<float*>(s->data())[0] = float(++runs); });
            },
            Site::current());
        return x + state;
      },
      {.verify = true});
  std::string e = error_of([&] { (void)f(on_gpu({1, 2, 3}, {3})); });
  EXPECT_NE(e.find("verify: node 0 (impure"), std::string::npos) << e;
  EXPECT_NE(e.find("differs between the CUDA graph and the node-by-node launch on cuda:8"),
            std::string::npos)
      << e;
}

// Fusion on a GPU: elementwise chains become step-interpreter kernels (ops/fused_chain.h).
Tensor chain_of_ops(const Tensor& x, const Tensor& b) {
  Tensor y = exp(x * 0.5) - b;
  for (int i = 0; i < 6; ++i) y = y + 1.0;  // re-rolled into one repeated step
  return tanh(y) * b + sqrt(abs(x));
}

TEST(DeviceGraphFusion, FusedChainsEqualEagerBitwiseInFewerNodes) {
  auto f = trace::function(chain_of_ops, {.name = "fused", .fusion = trace::Fusion::elementwise});
  auto plain = trace::function(chain_of_ops, {.name = "plain"});
  for (int call = 0; call < 3; ++call) {
    Tensor x = on_gpu(values(40, 0.1f * float(call + 1)), {5, 8});
    Tensor b = on_gpu(values(40, 0.3f), {5, 8});
    std::vector<float> want = chain_of_ops(x, b).to_vector<float>();
    EXPECT_EQ(f(x, b).to_vector<float>(), want) << call;
    EXPECT_EQ(plain(x, b).to_vector<float>(), want) << call;
  }
  trace::FunctionStats fs = f.stats(), ps = plain.stats();
  EXPECT_EQ(fs.graph_fallback, "");
  EXPECT_EQ(fs.fused_kernels, 1);
  EXPECT_EQ(fs.kernels, 1) << "the whole chain is one kernel";
  EXPECT_LT(fs.graph_nodes, ps.graph_nodes);
  EXPECT_LT(fs.arena_bytes, ps.arena_bytes) << "fused-away values need no memory";
  // The fake runs kernels on the host: the chain is interpreted there, and the stats say so
  // (on a GPU it is NVRTC-compiled: tests/cuda/test_cuda_trace.cpp).
  EXPECT_EQ(fs.compiled_chains, 0);
  EXPECT_NE(fs.chain_fallback.find("host-kernel fake"), std::string::npos) << fs.chain_fallback;
}

TEST(DeviceGraphFusion, ATrainingStepWithFusionEqualsEager) {
  test_util::TrainRig eager = make_rig(false), traced = make_rig(false);
  auto f = trace::function(
      [&](const Tensor& x, const Tensor& y) { return train_step(traced, x, y); },
      {.name = "fused_step", .fusion = trace::Fusion::elementwise, .warmup_calls = 1});
  Generator data(3);
  for (int i = 0; i < 6; ++i) {
    Tensor x = randn({24, 12}, DType::float32, data, gpu());
    Tensor y = randn({24, 1}, DType::float32, data, gpu());
    ASSERT_EQ(train_step(eager, x, y).to_vector<float>(), f(x, y).to_vector<float>()) << i;
  }
  EXPECT_GT(f.stats().fused_kernels, 0);
  EXPECT_EQ(f.stats().graph_fallback, "");
}

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

// Programmatic edges (cuda::programmatic_edges_wanted): CUDA takes them node by node but
// may refuse the whole graph (in a WHILE node's body, say); the graph is then built again
// with ordinary edges instead of losing it, and the stats say why.
TEST(DeviceGraph, AGraphRefusedWithProgrammaticEdgesIsBuiltWithOrdinaryOnes) {
  struct Restore {
    bool wanted = cuda::programmatic_edges_enabled();
    ~Restore() {
      cuda::set_programmatic_edges_enabled(wanted);
      fake().refuse_programmatic_graphs(false);
    }
  } restore;
  auto body = [](const Tensor& x) { return trace::loop(4, step, exp(x * 0.5) - 1.0); };
  cuda::set_programmatic_edges_enabled(true);
  for (bool refused : {false, true}) {
    fake().refuse_programmatic_graphs(refused);
    auto f = trace::function(body, {.name = "programmatic", .loop_unroll = 1});
    const uint64_t edges = cuda::programmatic_edges_added();
    Tensor x = on_gpu(values(6, 0.25f), {2, 3});
    EXPECT_EQ(f(x).to_vector<float>(), body(x).to_vector<float>()) << refused;
    trace::FunctionStats s = f.stats();
    EXPECT_EQ(s.graph_fallback, "") << "the graph runs";
    EXPECT_GT(s.graph_nodes, 0u);
    EXPECT_GT(cuda::programmatic_edges_added(), edges) << "the first build had them";
    if (refused) {
      EXPECT_NE(s.graph_ordinary_edges_because.find("programmatic edges"), std::string::npos)
          << s.graph_ordinary_edges_because;
      {
        cuda::OrdinaryEdgesOnly ordinary;
        EXPECT_FALSE(cuda::programmatic_edges_wanted()) << "held off on this thread";
      }
      EXPECT_TRUE(cuda::programmatic_edges_wanted()) << "and wanted again after the rebuild";
    } else {
      EXPECT_EQ(s.graph_ordinary_edges_because, "");
    }
    Tensor x2 = on_gpu(values(6, 0.5f), {2, 3});
    EXPECT_EQ(f(x2).to_vector<float>(), body(x2).to_vector<float>()) << "replays " << refused;
  }

  // The function's next signature starts with ordinary edges once one graph needed them.
  auto g = trace::function(body, {.name = "programmatic", .cache_budget = 1, .loop_unroll = 1});
  Tensor x = on_gpu(values(6, 0.25f), {2, 3});
  g(x).wait_to_read();
  const uint64_t edges = cuda::programmatic_edges_added_here();
  Tensor y = on_gpu(values(4, 0.25f), {4});
  EXPECT_EQ(g(y).to_vector<float>(), body(y).to_vector<float>());
  EXPECT_EQ(cuda::programmatic_edges_added_here(), edges) << "built once, with ordinary edges";
  EXPECT_NE(g.stats().graph_ordinary_edges_because, "");
  EXPECT_EQ(g.stats().graph_fallback, "");

  // A refused capture is not an instantiation refused for the edges: no second build.
  fake().refuse_programmatic_graphs(false);
  auto h = trace::function(body, {.name = "capture refused", .loop_unroll = 1});
  fake().refuse_next_capture("a launch this fake will not capture");
  EXPECT_EQ(h(x).to_vector<float>(), body(x).to_vector<float>());
  EXPECT_NE(h.stats().graph_fallback.find("will not capture"), std::string::npos)
      << h.stats().graph_fallback;
  EXPECT_EQ(h.stats().graph_ordinary_edges_because, "");
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

// Chained iterations (trace/device_loop.h): where each next state is a value the body
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
