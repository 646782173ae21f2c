// The GPU trace executor (trace/cuda/device_graph.h) on a recording fake of a GPU: verify = true
// (node by node against the graph) and fused elementwise chains.
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
using test_util::train_step;

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

}  // namespace
}  // namespace tide
