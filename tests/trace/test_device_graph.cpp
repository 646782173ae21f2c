// The GPU trace executor (trace/cuda/device_graph.h) on a recording fake of a GPU: the CUDA
// graph built for a trace has one captured node per planned node, the trace's dependency
// edges, a copy node per input before the roots and per output after the sinks; replays
// equal eager; outputs stay fresh over many replays; nothing allocates during capture (the
// fake refuses it as CUDA does); a refused capture falls back to launching the nodes one
// by one and the stats say why; replays on two streams do not share the arena unordered;
// a retrace after an eviction updates the evicted exec in place; what is not supported yet
// on a GPU is refused with a clear error. Loops: test_device_graph_loop.cpp; verify and
// fusion: test_device_graph_fusion.cpp.
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

// nanoGPT's step (AdamW over decay groups, the global-norm clip fused into the update, the
// warmup-cosine schedule) as one CUDA graph: the norm, the learning rate and the parameters
// follow eager on every replay, and the graph is never rebuilt for a new lr.
TEST(DeviceGraph, ClippedScheduledTrainingStepEqualsEager) {
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused clip" : "clip_grad_norm_");
    test_util::RigOptions o{.sizes = {12, 32, 1}, .device = gpu(), .adam = true};
    test_util::ClipOptions c{.max_norm = 1.0, .fused = fused};
    test_util::TrainRig eager = test_util::make_clipped_rig(o, c);
    test_util::TrainRig traced = test_util::make_clipped_rig(o, c);
    auto f = trace::function(
        [&](const Tensor& x, const Tensor& y) { return test_util::clipped_step(traced, x, y); },
        {.name = "clipped_step", .warmup_calls = 1});
    Generator data(3);
    for (int i = 0; i < 14; ++i) {
      Tensor x = randn({24, 12}, DType::float32, data, gpu());
      Tensor y = randn({24, 1}, DType::float32, data, gpu());
      std::vector<Tensor> e = test_util::clipped_step(eager, x, y), t = f(x, y);
      ASSERT_EQ(e[0].to_vector<float>(), t[0].to_vector<float>()) << "loss at step " << i;
      ASSERT_EQ(e[1].to_vector<float>(), t[1].to_vector<float>()) << "norm at step " << i;
      ASSERT_EQ(eager.opt->lr_tensor().to_vector<float>(),
                traced.opt->lr_tensor().to_vector<float>())
          << "lr at step " << i;
    }
    auto pe = eager.model->named_parameters(), pt = traced.model->named_parameters();
    for (size_t i = 0; i < pe.size(); ++i)
      EXPECT_EQ(pe[i].second.to_vector<float>(), pt[i].second.to_vector<float>()) << pe[i].first;
    trace::FunctionStats s = f.stats();
    EXPECT_EQ(s.traces, 1);
    EXPECT_EQ(s.replays, 13);
    EXPECT_EQ(s.graph_instantiations, 1) << "a new lr or scale must not rebuild the graph";
    EXPECT_EQ(s.graph_fallback, "");
  }
}

// A CUDA graph runs independent nodes in any order, or at once: the training step's graph
// holds every edge it needs when its replays equal eager with the fake running ready nodes
// earliest first, shuffled (three seeds) and all at once on threads of their own.
TEST(DeviceGraph, TrainingStepEqualsEagerInAnyNodeOrderAndAtOnce) {
  struct Restore {
    ~Restore() { fake().set_node_order(FakeDevice::NodeOrder::latest_first); }
  } restore;
  const std::pair<FakeDevice::NodeOrder, uint64_t> orders[] = {
      {FakeDevice::NodeOrder::earliest_first, 1},
      {FakeDevice::NodeOrder::shuffled, 1},
      {FakeDevice::NodeOrder::shuffled, 2},
      {FakeDevice::NodeOrder::shuffled, 3},
      {FakeDevice::NodeOrder::concurrent, 1}};
  for (const auto& [order, seed] : orders) {
    SCOPED_TRACE(::testing::Message() << "order " << int(order) << ", seed " << seed);
    fake().set_node_order(order, seed);
    check_training(true);
  }
}

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

}  // namespace
}  // namespace tide
