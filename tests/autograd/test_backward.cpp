// Autograd mechanics (docs/architecture.md, Ops and autograd): accumulation into .grad (a fresh
// first gradient taken, a shared one copied), zero_grad, NoGrad, the errors of requires_grad_ and
// backward, freed graphs and retain_graph, diamonds, explicit output gradients, backward that
// queues without waiting, and two threads differentiating at once. Per-op gradient values are
// checked by the op harness in tests/ops, not here.
#include <optional>
#include <thread>

#include "../core/test_support.h"
#include "../fake_gpu.h"
#include "core/profiler.h"

namespace tide {
namespace {

using namespace testing_support;

class Backward : public EngineTest {};

std::vector<float> values(const Tensor& t) { return t.to_vector(); }

TEST_F(Backward, GradientsAccumulateOverBackwardCalls) {
  Tensor x = from_data({1, 2, 3}, {3}).requires_grad_();
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(x.grad().defined());
  sum(mul(x, x)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{2, 4, 6}));
  sum(mul(x, x)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{4, 8, 12}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  sum(mul(x, 3.0)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{3, 3, 3}));
}

TEST_F(Backward, AGradHandleSeesLaterAccumulation) {
  Tensor x = from_data({1, 2}, {2}).requires_grad_();
  sum(x).backward();
  Tensor g = x.grad();
  sum(mul(x, 2.0)).backward();
  EXPECT_EQ(values(g), (std::vector<float>{3, 3}));  // accumulated in place, like PyTorch
}

TEST_F(Backward, FirstGradientDoesNotAliasTheSeed) {
  // backward(seed) on a leaf stores a copy of the seed: accumulating into the gradient
  // later must not change the caller's tensor.
  Tensor x = from_data({1, 2}, {2}).requires_grad_();
  Tensor seed = from_data({5, 6}, {2});
  x.backward(seed);  // backward of a leaf: accumulates the seed itself
  sum(x).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{6, 7}));
  EXPECT_EQ(values(seed), (std::vector<float>{5, 6}));
}

TEST_F(Backward, AFreshFirstGradientBecomesTheGradWithoutACopy) {
  // The first backward's gradient of x is the mul's fresh output, seen by nobody else: it
  // becomes x.grad as it is. The second backward adds its gradient in place. So the first
  // queues one op fewer than the second; with a copy they would queue as many.
  Tensor x = from_data({1, 2, 3}, {3}).requires_grad_();
  Tensor c = from_data({4, 5, 6}, {3});
  auto tasks_of_backward = [&] {
    Tensor loss = sum(mul(x, c));
    wait_all();
    uint64_t before = Engine::get().stats().queued;
    loss.backward();
    return Engine::get().stats().queued - before;
  };
  uint64_t first = tasks_of_backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{4, 5, 6}));
  uint64_t second = tasks_of_backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{8, 10, 12}));
  EXPECT_EQ(first + 1, second);
}

TEST_F(Backward, AGradientTwoLeavesShareIsCopied) {
  // add passes one gradient tensor to both inputs: taking it for both would make x.grad
  // and z.grad one tensor, and the second backward would add into it twice.
  Tensor x = from_data({1, 2}, {2}).requires_grad_();
  Tensor z = from_data({3, 4}, {2}).requires_grad_();
  sum(add(x, z)).backward();
  sum(add(x, z)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{2, 2}));
  EXPECT_EQ(values(z.grad()), (std::vector<float>{2, 2}));
}

TEST_F(Backward, ASeedPassedThroughToALeafIsCopied) {
  // add(x, 1) hands the caller's seed itself to x: it must be copied, not taken.
  Tensor x = from_data({1, 2}, {2}).requires_grad_();
  Tensor seed = from_data({5, 6}, {2});
  add(x, 1.0).backward(seed);
  sum(x).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{6, 7}));
  EXPECT_EQ(values(seed), (std::vector<float>{5, 6}));
}

TEST_F(Backward, IntermediatesRecordTheirOp) {
  Tensor x = from_data({1, 2}, {2}).requires_grad_();
  Tensor c = from_data({3, 4}, {2});
  Tensor y = mul(x, c);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  Tensor z = mul(c, c);
  EXPECT_FALSE(z.requires_grad());
  EXPECT_TRUE(z.is_leaf());
  sum(y).backward();
  EXPECT_FALSE(c.grad().defined());  // a constant gets no gradient
  EXPECT_FALSE(y.grad().defined());  // nor does a non-leaf
  EXPECT_EQ(values(x.grad()), (std::vector<float>{3, 4}));
}

TEST_F(Backward, NoGradRecordsNothing) {
  Tensor x = from_data({1, 2}, {2}).requires_grad_();
  EXPECT_TRUE(autograd::grad_enabled());
  Tensor y;
  {
    NoGrad ng;
    EXPECT_FALSE(autograd::grad_enabled());
    {
      NoGrad nested;
      EXPECT_FALSE(autograd::grad_enabled());
    }
    EXPECT_FALSE(autograd::grad_enabled());
    y = mul(x, x);
    x.add_(from_data({1, 1}, {2}));  // in-place updates are allowed without recording
  }
  EXPECT_TRUE(autograd::grad_enabled());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
  EXPECT_TRUE(contains(error_of([&] { y.backward(); }), "[backward]"));
  EXPECT_EQ(values(x), (std::vector<float>{2, 3}));
  // The guard is per thread.
  bool other_thread_enabled = false;
  {
    NoGrad ng;
    std::thread([&] { other_thread_enabled = autograd::grad_enabled(); }).join();
  }
  EXPECT_TRUE(other_thread_enabled);
}

TEST_F(Backward, InPlaceUpdateOfATensorRequiringGradIsRefusedWhileRecording) {
  Tensor x = from_data({1, 2}, {2}).requires_grad_();
  EXPECT_TRUE(contains(error_of([&] { x.add_(from_data({1, 1}, {2})); }), "[add_]"));
  EXPECT_EQ(values(x), (std::vector<float>{1, 2}));
}

TEST_F(Backward, RequiresGradErrors) {
  Tensor i = from_vector<int32_t>({1, 2}, {2});
  EXPECT_TRUE(contains(error_of([&] { i.requires_grad_(); }), "[requires_grad]"));
  EXPECT_FALSE(i.requires_grad());
  EXPECT_NO_THROW(i.requires_grad_(false));
  Tensor l = arange(3);  // int64
  EXPECT_TRUE(contains(error_of([&] { l.requires_grad_(); }), "[requires_grad]"));
  Tensor x = from_data({1, 2}, {2}).requires_grad_();
  Tensor y = mul(x, 2.0);
  EXPECT_TRUE(contains(error_of([&] { y.requires_grad_(); }), "[requires_grad]"));  // not a leaf
  Tensor d = from_data({1}, {1}, DType::float64).requires_grad_();
  EXPECT_TRUE(d.requires_grad());
}

TEST_F(Backward, BackwardErrors) {
  Tensor c = from_data({1, 2}, {2});
  std::string m = error_of([&] { sum(c).backward(); });
  EXPECT_TRUE(contains(m, "[backward]"));
  EXPECT_TRUE(contains(m, "does not require grad"));

  Tensor x = from_data({1, 2}, {2}).requires_grad_();
  Tensor y = mul(x, 2.0);
  EXPECT_TRUE(contains(error_of([&] { y.backward(); }), "[backward]"));  // not a scalar
  EXPECT_TRUE(contains(error_of([&] { y.backward(from_data({1, 2, 3}, {3})); }), "[backward]"));
  EXPECT_TRUE(contains(error_of([&] {
                         y.backward(from_data({1, 2}, {2}, DType::float64));
                       }),
                       "[backward]"));
  EXPECT_FALSE(x.grad().defined());
}

// Found by the random API driver: a gradient on another device was accepted, failed
// halfway through backward ("[mul] devices differ") and left a partial grad; on a leaf it
// left a grad on the wrong device. Refused at the call, before anything is queued.
TEST_F(Backward, AGradientOnAnotherDeviceIsRefusedAtTheCall) {
  test_util::fake_gpu(8);
  Tensor x = from_vector(std::vector<float>{1, 2, 3}, Shape{3}, Device::cuda(8));
  x.requires_grad_();
  Tensor y = exp(x) + x * 2.0;
  Tensor cpu_grad = ones({3});
  const uint64_t queued = Engine::get().stats().queued;
  const std::string m = error_of([&] { y.backward(cpu_grad); });
  EXPECT_TRUE(contains(m, "[backward]")) << m;
  EXPECT_TRUE(contains(m, "cuda:8")) << m;
  EXPECT_EQ(Engine::get().stats().queued, queued);
  EXPECT_FALSE(x.grad().defined());
  Tensor leaf = from_vector(std::vector<float>{1, 2, 3}, Shape{3}, Device::cuda(8));
  leaf.requires_grad_();
  EXPECT_TRUE(contains(error_of([&] { leaf.backward(ones({3})); }), "[backward]"));
  EXPECT_FALSE(leaf.grad().defined());
}

TEST_F(Backward, SecondBackwardThroughAFreedGraphThrows) {
  Tensor x = from_data({1, 2, 3}, {3}).requires_grad_();
  Tensor loss = sum(mul(exp(x), 2.0));
  loss.backward();
  const std::vector<float> g1 = values(x.grad());
  std::string m = error_of([&] { loss.backward(); });
  EXPECT_TRUE(contains(m, "[backward]"));
  EXPECT_TRUE(contains(m, "retain_graph"));
  EXPECT_EQ(values(x.grad()), g1);  // nothing was accumulated by the failed call
  // A new graph over the same leaves works.
  x.zero_grad();
  sum(mul(exp(x), 2.0)).backward();
  EXPECT_EQ(values(x.grad()), g1);
}

TEST_F(Backward, FailedBackwardQueuesNothing) {
  // Like any op's argument check, a refused backward() throws before queueing work.
  Tensor x = from_data({1, 2, 3}, {3}).requires_grad_();
  Tensor loss = sum(mul(x, x));
  loss.backward();
  Engine::get().synchronize();
  const uint64_t queued = Engine::get().stats().queued;
  EXPECT_THROW(loss.backward(), Error);
  EXPECT_THROW(sum(from_data({1}, {1})).backward(), Error);
  const uint64_t after_sum = queued + 1;  // the sum itself is queued
  EXPECT_EQ(Engine::get().stats().queued, after_sum);
}

TEST_F(Backward, RetainGraphAllowsASecondBackward) {
  Tensor x = from_data({1, 2, 3}, {3}).requires_grad_();
  Tensor loss = sum(mul(x, x));
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward(Tensor(), true);
  EXPECT_EQ(values(x.grad()), (std::vector<float>{4, 8, 12}));
  loss.backward();  // the last one may free it
  EXPECT_EQ(values(x.grad()), (std::vector<float>{6, 12, 18}));
  EXPECT_TRUE(contains(error_of([&] { loss.backward(); }), "retain_graph"));
}

TEST_F(Backward, DiamondGraphsSumTheirContributions) {
  // x used twice by one op and by two ops: d/dx (x*x + 3x) = 2x + 3.
  Tensor x = from_data({1, 2, 3}, {3}).requires_grad_();
  sum(add(mul(x, x), mul(x, 3.0))).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{5, 7, 9}));

  // An intermediate used by two branches: h = 2x, y = h*h + h, dy/dx = (2h + 1) * 2.
  Tensor z = from_data({1, -1, 0.5}, {3}).requires_grad_();
  Tensor h = mul(z, 2.0);
  sum(add(mul(h, h), h)).backward();
  EXPECT_EQ(values(z.grad()), (std::vector<float>{10, -6, 6}));

  // A deeper diamond: a -> (b, c) -> d, with b and c sharing a -> e.
  Tensor w = from_data({2}, {1}).requires_grad_();
  Tensor a = add(w, 1.0);  // 3
  Tensor b = mul(a, a);    // 9, db/da = 2a = 6
  Tensor c = mul(a, 4.0);  // 12, dc/da = 4
  Tensor d = mul(b, c);    // 108, dd/da = c*6 + b*4 = 72 + 36 = 108
  sum(d).backward();
  EXPECT_EQ(values(w.grad()), (std::vector<float>{108}));
}

TEST_F(Backward, NonScalarWithAnExplicitGradient) {
  Tensor x = from_data({1, 2, 3}, {3}).requires_grad_();
  Tensor y = mul(x, x);
  y.backward(from_data({1, 10, 100}, {3}));
  EXPECT_EQ(values(x.grad()), (std::vector<float>{2, 40, 600}));
  Tensor m = from_data({1, 2, 3, 4}, {2, 2}).requires_grad_();
  Tensor r = mul(m.reshape({4}), 3.0);
  r.backward(ones({4}));
  EXPECT_EQ(m.grad().shape(), Shape({2, 2}));
  EXPECT_EQ(values(m.grad()), (std::vector<float>{3, 3, 3, 3}));
}

TEST_F(Backward, ViewsAndSlicesPassGradientsToTheirBase) {
  Tensor x = from_data({1, 2, 3, 4, 5, 6}, {3, 2}).requires_grad_();
  sum(mul(x.slice(1, 3), 2.0)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{0, 0, 2, 2, 2, 2}));
  x.zero_grad();
  sum(x[0]).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{1, 1, 0, 0, 0, 0}));
}

TEST_F(Backward, BackwardQueuesWithoutWaiting) {
  Tensor x = from_data({1, 2, 3}, {3}).requires_grad_();
  Tensor tag = zeros({1});
  Engine::get().synchronize();
  Gate gate;
  gate.hold(tag);  // the stream is held: nothing after this can run
  Tensor loss = sum(mul(x, x));
  const uint64_t queued = Engine::get().stats().queued;
  loss.backward();                                  // returns although the forward has not run
  EXPECT_GT(Engine::get().stats().queued, queued);  // it queued the gradient ops
  ASSERT_TRUE(x.grad().defined());
  EXPECT_FALSE(x.grad().is_ready());
  EXPECT_FALSE(loss.is_ready());
  gate.open();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{2, 4, 6}));
  EXPECT_FALSE(gate.timed_out());
}

TEST_F(Backward, FailuresFlowIntoGradients) {
  // A failed forward op poisons the gradients that depend on it, at their sync.
  Tensor x = from_data({1, 2}, {2}).requires_grad_();
  Tensor y = mul(x, 2.0);
  Tensor bad = zeros({2});
  debug::fail(y.detach(), bad, "forward failed");
  Tensor loss = sum(mul(y, bad));  // d loss/dy = bad, which failed
  loss.backward();
  EXPECT_TRUE(contains(error_of([&] { x.grad().wait_to_read(); }), "forward failed"));
}

TEST_F(Backward, TwoThreadsDifferentiateAtOnce) {
  constexpr int kIters = 40;
  std::vector<std::vector<float>> grads(2);
  std::vector<float> losses(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      // Thread 0 on the default stream, thread 1 on its own.
      std::optional<StreamGuard> g;
      if (t == 1) g.emplace(test_stream(0));
      Tensor w = full({4, 3}, double(t + 1)).requires_grad_();
      Tensor x = from_data({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
      for (int i = 0; i < kIters; ++i) {
        Tensor loss = sum(relu(matmul(x, w)));  // all entries positive
        loss.backward();
        if (i == kIters - 1) losses[size_t(t)] = loss.item();
      }
      grads[size_t(t)] = w.grad().to_vector();
    });
  for (auto& th : threads) th.join();
  // d/dw sum(x @ w) = x^T @ ones: row k of the gradient is the sum of column k of x.
  const std::vector<float> col = {6, 8, 10, 12};
  for (int t = 0; t < 2; ++t) {
    ASSERT_EQ(grads[size_t(t)].size(), 12u);
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 3; ++j)
        EXPECT_EQ(grads[size_t(t)][size_t(k * 3 + j)], float(kIters) * col[size_t(k)]);
    EXPECT_EQ(losses[size_t(t)], float(t + 1) * 36.0f * 3.0f);
  }
}

}  // namespace
}  // namespace tide

namespace tide {
namespace {
// matmul's backward computes only the gradients an input needs: for a data batch x that
// does not require grad, dx (a whole GEMM) is never queued.
TEST_F(Backward, MatmulSkipsTheGradientOfAnInputWithoutGrad) {
  Tensor x = randn({8, 5});
  Tensor w = randn({5, 3});
  w.requires_grad_();
  Tensor loss = sum(matmul(x, w));
  auto matmuls = [] {
    uint64_t n = 0;
    for (const auto& r : profiler::ops()) n += std::string_view(r.op) == "matmul";
    return n;
  };
  profiler::start();
  loss.backward();
  wait_all();
  profiler::stop();
  EXPECT_EQ(matmuls(), 1u);  // dW only
  EXPECT_EQ(w.grad().shape(), Shape({5, 3}));
  Tensor x2 = randn({8, 5});
  x2.requires_grad_();
  Tensor loss2 = sum(matmul(x2, w));
  profiler::start();
  loss2.backward();
  wait_all();
  profiler::stop();
  EXPECT_EQ(matmuls(), 2u);  // dx and dW
}
}  // namespace
}  // namespace tide
