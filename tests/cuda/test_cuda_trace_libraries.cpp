// Library kernels inside CUDA graphs on a real GPU (cuda:0; the binary exits 77 without
// one): cuDNN convolutions captured on a worker that never ran one (its handle is made
// before the capture: ops/kernel_entry.h, prepare_capture), CUB reductions and cuDNN inside
// a WHILE body, and the node-by-node fallback when a node needs more scratch than the
// graph's workspace. Each result equals eager bit for bit on the same device.
#include <gtest/gtest.h>

#include <vector>

#include "core/determinism.h"
#include "core/engine/engine.h"
#include "core/rng.h"
#include "ops/ops.h"
#include "trace/trace.h"

namespace tide {
namespace {

Device gpu() { return Device::cuda(0); }

Tensor conv_block(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y = conv2d(x, w, b, Conv2dOptions().padding(1));
  return max_pool2d(relu(y), Pool2dOptions(2));
}

// A worker thread that has run no convolution: a fresh stream. The trace records on the
// first call (no warm-up), so the graph captures the convolutions before any eager one ran
// there; without the preparer cudnnCreate would run inside the capture and CUDA would
// refuse it.
TEST(CudaTraceLibraries, ConvolutionsOnAFreshWorkerAreCapturedWithoutWarmUp) {
  Stream fresh = Stream::create(gpu());
  StreamGuard on(fresh);
  Generator gen(5);
  Tensor w = randn({8, 3, 3, 3}, DType::float32, gen, gpu()) * 0.2;
  Tensor b = randn({8}, DType::float32, gen, gpu()) * 0.1;
  auto f = trace::function([&](const Tensor& x) { return conv_block(x, w, b); },
                           {.name = "conv_block", .warmup_calls = 0});
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({4, 3, 16, 16}, DType::float32, gen, gpu());
    EXPECT_EQ(f(x).to_vector<float>(), conv_block(x, w, b).to_vector<float>()) << i;
  }
  EXPECT_EQ(f.stats().graph_fallback, "") << "the capture must not create a cuDNN handle";
}

// The backward too: the input and weight gradients (two more cuDNN passes) in the graph.
TEST(CudaTraceLibraries, ATracedConvolutionStepEqualsEager) {
  Stream fresh = Stream::create(gpu());
  StreamGuard on(fresh);
  Generator gen(6);
  auto make = [&] {
    Generator g(9);
    Tensor w = randn({4, 2, 3, 3}, DType::float32, g, gpu()) * 0.3;
    w.requires_grad_(true);
    return w;
  };
  Tensor we = make(), wt = make();
  auto step = [](Tensor& w, const Tensor& x) {
    w.zero_grad();
    Tensor loss = mean(conv2d(x, w, Tensor(), Conv2dOptions().padding(1)) * 0.5);
    loss.backward();
    NoGrad ng;
    w.sub_(w.grad(), 0.1);
    return loss;
  };
  auto f = trace::function([&](const Tensor& x) { return step(wt, x); }, {.warmup_calls = 0});
  for (int i = 0; i < 4; ++i) {
    Tensor x = randn({2, 2, 10, 10}, DType::float32, gen, gpu());
    EXPECT_EQ(f(x).to_vector<float>(), step(we, x).to_vector<float>()) << i;
  }
  EXPECT_EQ(wt.to_vector<float>(), we.to_vector<float>());
  EXPECT_EQ(f.stats().graph_fallback, "");
}

// With deterministic_algorithms(false) a convolution takes cuDNN's fastest algorithm that
// fits; eager and traced calls under the setting make the same choice (forward algorithms
// use no atomics), so they still agree bit for bit.
TEST(CudaTraceLibraries, TheFastestForwardAlgorithmGivesTracedEqualsEager) {
  DeterministicAlgorithmsGuard off(false);
  Generator gen(4);
  Tensor w = randn({16, 8, 3, 3}, DType::float32, gen, gpu()) * 0.2;
  Tensor b = randn({16}, DType::float32, gen, gpu()) * 0.1;
  auto f = trace::function([&](const Tensor& x) { return conv_block(x, w, b); });
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({8, 8, 32, 32}, DType::float32, gen, gpu());
    EXPECT_EQ(f(x).to_vector<float>(), conv_block(x, w, b).to_vector<float>()) << i;
  }
  EXPECT_EQ(f.stats().graph_fallback, "");
}

// CUB (the mean) and cuDNN (the convolution) inside a WHILE body: the body graph's nodes
// share the body's workspace, and the loop's counters run on the device.
TEST(CudaTraceLibraries, CubAndCudnnInsideAWhileBodyEqualTheEagerLoop) {
  Generator gen(7);
  Tensor w = randn({3, 3, 3, 3}, DType::float32, gen, gpu()) * 0.2;
  auto body = [&](const Tensor& s) {
    return tanh(conv2d(s, w, Tensor(), Conv2dOptions().padding(1))) + mean(s) * 0.1;
  };
  auto f =
      trace::function([&](const Tensor& x, const Tensor& n) { return trace::loop(n, body, x); });
  Tensor x = randn({2, 3, 12, 12}, DType::float32, gen, gpu());
  for (int64_t n : {0, 1, 5, 12}) {
    Tensor count = full({1}, double(n), DType::int64, gpu());
    EXPECT_EQ(f(x, count).to_vector<float>(), trace::loop(n, body, x).to_vector<float>())
        << "n = " << n;
  }
  EXPECT_EQ(f.stats().graph_fallback, "") << "CUDA must accept library nodes in a WHILE body";
}

// A node whose scratch passes the graph's workspace (a sort of 2^21 row ids needs 64 MiB of
// key and position arrays) cannot take memory while captured: the replay launches the
// nodes one by one instead, says why, and still gives eager's bits.
TEST(CudaTraceLibraries, ANodeNeedingMoreScratchFallsBackNodeByNodeAndEqualsEager) {
  const int64_t k = int64_t(1) << 21, n = 1000;
  Generator gen(8);
  Tensor g = randn({k, 2}, DType::float32, gen, gpu());
  std::vector<int64_t> row_ids(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) row_ids[size_t(i)] = (i * 7919) % n;
  Tensor rows = from_vector<int64_t>(row_ids, {k}).to(gpu());
  auto f = trace::function([&](const Tensor& a) { return scatter_add_rows(a, rows, n) * 2.0; });
  Tensor traced = f(g), eager = scatter_add_rows(g, rows, n) * 2.0;
  EXPECT_EQ(traced.to_vector<float>(), eager.to_vector<float>());
  EXPECT_NE(f.stats().graph_fallback, "") << "the sort's scratch cannot be baked into a graph";
  Tensor again = f(g * 0.5);  // the fallback replays too
  EXPECT_EQ(again.to_vector<float>(),
            (scatter_add_rows(g * 0.5, rows, n) * 2.0).to_vector<float>());
}

}  // namespace
}  // namespace tide
