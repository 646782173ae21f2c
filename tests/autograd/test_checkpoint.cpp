// checkpoint (ops/checkpoint.h): loss and every gradient bitwise equal to the same code
// without it (an MLP block; with dropout from the default and from an explicit generator;
// nested; traced; on the fake GPU), the recompute really runs and keeps nothing between,
// parameters reached only by capture, the no-grad path, retain_graph, and the errors.
// The GPT cases (a block with dropout, whole training steps, memory) are in
// tests/nn/test_gpt_recompute.cpp.
#include <functional>
#include <vector>

#include "../core/test_support.h"
#include "../fake_gpu.h"

namespace tide {
namespace {

using namespace testing_support;

class Checkpoint : public EngineTest {};

std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

// N(0, 1) data of its own seed, on `device`.
Tensor data(const Shape& shape, uint64_t seed, Device device) {
  Generator g(seed);
  return randn(shape, DType::float32, g).to(device);
}

// A residual MLP block's weights: y = x + dropout(gelu(x @ w1 + b1) @ w2 + b2).
struct Mlp {
  Mlp(int64_t width, Device device, uint64_t seed) {
    Generator g(seed);
    w1 = mul(randn({width, 4 * width}, DType::float32, g), 0.3).to(device).requires_grad_();
    b1 = mul(randn({4 * width}, DType::float32, g), 0.1).to(device).requires_grad_();
    w2 = mul(randn({4 * width, width}, DType::float32, g), 0.3).to(device).requires_grad_();
    b2 = mul(randn({width}, DType::float32, g), 0.1).to(device).requires_grad_();
  }
  Tensor forward(const Tensor& x, double p = 0.0, Generator& gen = default_generator()) const {
    Tensor h = gelu(add(matmul(x, w1), b1), GeluApprox::tanh);
    return add(x, dropout(add(matmul(h, w2), b2), p, true, gen));
  }
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
  void zero_grad() {
    for (Tensor p : params()) p.zero_grad();
  }
  Tensor w1, b1, w2, b2;
};

// The loss, the input's gradient and every parameter's gradient, read back.
struct Result {
  std::vector<float> loss, x_grad;
  std::vector<std::vector<float>> grads;
  bool operator==(const Result&) const = default;
};

// Three blocks in a row over x, each plain or checkpointed, then a sum of squares.
Result run(Mlp& m, const Tensor& x0, bool checkpointed, double p, Generator& gen) {
  m.zero_grad();
  Tensor x = x0.detach().requires_grad_();
  Tensor h = x;
  for (int i = 0; i < 3; ++i) {
    auto block = [&m, p, &gen](const Tensor& in) { return m.forward(in, p, gen); };
    h = checkpointed ? checkpoint(block, h) : block(h);
  }
  Tensor loss = sum(mul(h, h));
  loss.backward();
  Result r{values(loss), values(x.grad()), {}};
  for (const Tensor& q : m.params()) r.grads.push_back(values(q.grad()));
  return r;
}

void check_bitwise(Device device, double p, bool explicit_generator) {
  Mlp m(8, device, 3);
  Tensor x = data({4, 8}, 5, device);
  Generator own(99);
  Generator& gen = explicit_generator ? own : default_generator();
  gen.manual_seed(7);
  Result plain = run(m, x, false, p, gen);
  const uint64_t after_plain = gen.offset();
  gen.manual_seed(7);
  Result ckpt = run(m, x, true, p, gen);
  EXPECT_EQ(gen.offset(), after_plain) << "the recompute must not advance the generator";
  EXPECT_TRUE(plain == ckpt) << "loss " << plain.loss[0] << " vs " << ckpt.loss[0];
  // Every gradient is there and not zero (the comparison above is not vacuous).
  for (const auto& g : ckpt.grads) {
    ASSERT_FALSE(g.empty());
    float total = 0;
    for (float v : g) total += v * v;
    EXPECT_GT(total, 0.0f);
  }
  if (p > 0) {  // dropout did drop: another seed gives another loss
    gen.manual_seed(8);
    EXPECT_NE(run(m, x, true, p, gen).loss, plain.loss);
  }
}

TEST_F(Checkpoint, MlpBlocksGiveTheSameLossAndGradientsBitwise) {
  check_bitwise(Device::cpu(), 0.0, false);
}

TEST_F(Checkpoint, DropoutFromTheDefaultGeneratorDrawsTheSameInTheRecompute) {
  check_bitwise(Device::cpu(), 0.3, false);
}

TEST_F(Checkpoint, DropoutFromAnExplicitGeneratorDrawsTheSameInTheRecompute) {
  check_bitwise(Device::cpu(), 0.3, true);
}

TEST_F(Checkpoint, BitwiseOnTheFakeGpu) {
  test_util::fake_gpu(8);
  check_bitwise(Device::cuda(8), 0.3, true);
}

TEST_F(Checkpoint, TheRecomputeRunsDuringBackwardOnceAndKeepsOnlyTheInputs) {
  Mlp m(4, Device::cpu(), 1);
  Tensor x = randn({2, 4}).requires_grad_();
  int calls = 0;
  Tensor y = checkpoint(
      [&](const Tensor& in) {
        ++calls;
        return m.forward(in);
      },
      x);
  EXPECT_EQ(calls, 1);
  ASSERT_FALSE(y.is_leaf());
  // One node over the one input: none of fn's ops was recorded.
  EXPECT_STREQ(y.impl().grad_fn->op, "checkpoint");
  ASSERT_EQ(y.impl().grad_fn->next.size(), 1u);
  EXPECT_EQ(y.impl().grad_fn->next[0].leaf, x.impl_ptr());
  EXPECT_FALSE(m.w1.grad().defined());
  sum(y).backward();
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(m.w1.grad().defined());
  EXPECT_TRUE(x.grad().defined());
}

TEST_F(Checkpoint, WithoutGradItOnlyRunsTheFunction) {
  Mlp m(4, Device::cpu(), 1);
  int calls = 0;
  auto fn = [&](const Tensor& in) {
    ++calls;
    return m.forward(in);
  };
  {
    NoGrad ng;
    Tensor y = checkpoint(fn, randn({2, 4}).requires_grad_());
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
  }
  // Nothing requires grad: neither the input nor a listed param.
  Tensor y = checkpoint([](const Tensor& in) { return mul(in, 2.0); }, randn({2, 4}));
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(values(y).size(), 8u);
}

TEST_F(Checkpoint, ParametersReachedOnlyByCaptureGetTheirGradientsWhenListed) {
  // The input is data (no grad): the listed params make the node.
  Mlp m(4, Device::cpu(), 2);
  Tensor x = randn({3, 4});
  auto fn = [&](const Tensor& in) { return m.forward(in); };
  sum(mul(fn(x), fn(x))).backward();
  std::vector<std::vector<float>> want;
  for (const Tensor& p : m.params()) want.push_back(values(p.grad()));
  m.zero_grad();
  Tensor y = checkpoint(fn, x, m.params());
  ASSERT_TRUE(y.requires_grad());
  sum(mul(y, y)).backward();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(values(m.params()[i].grad()), want[i]) << i;
}

TEST_F(Checkpoint, SeveralInputsSomeWithoutGrad) {
  Tensor a = randn({3, 5}).requires_grad_(), b = randn({3, 5}).requires_grad_();
  Tensor mask = gt(randn({3, 5}), 0.0);
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor t = tanh(mul(in[0], in[1]));
    return add(mul(t, cast(in[2], DType::float32)), mul(in[0], t));
  };
  sum(fn({a, b, mask})).backward();
  std::vector<float> ga = values(a.grad()), gb = values(b.grad());
  a.zero_grad();
  b.zero_grad();
  Tensor y = checkpoint(fn, {a, b, mask});
  EXPECT_FALSE(y.impl().grad_fn->next[2].fn || y.impl().grad_fn->next[2].leaf);
  sum(y).backward();
  EXPECT_EQ(values(a.grad()), ga);
  EXPECT_EQ(values(b.grad()), gb);
}

TEST_F(Checkpoint, AFunctionReturningItsInputPassesTheGradientThrough) {
  Tensor x = randn({4}).requires_grad_();
  Tensor y = checkpoint([](const Tensor& in) { return in; }, x);
  EXPECT_TRUE(x.is_leaf()) << "the node goes on a fresh handle, never on the input";
  mul(y, 3.0).backward(ones({4}));
  EXPECT_EQ(values(x.grad()), std::vector<float>(4, 3.0f));
}

TEST_F(Checkpoint, NestedCheckpointsWithDropoutAreBitwiseEqual) {
  Mlp m(6, Device::cpu(), 4);
  Tensor x0 = randn({2, 6});
  Generator gen(1);
  auto inner = [&](const Tensor& in) { return m.forward(in, 0.25, gen); };
  auto outer = [&](const Tensor& in) { return inner(checkpoint(inner, inner(in))); };
  auto once = [&](bool ckpt) {
    m.zero_grad();
    gen.manual_seed(3);
    Tensor x = x0.detach().requires_grad_();
    Tensor y = ckpt ? checkpoint(outer, x) : outer(x);
    Tensor loss = sum(mul(y, y));
    loss.backward();
    Result r{values(loss), values(x.grad()), {}};
    for (const Tensor& q : m.params()) r.grads.push_back(values(q.grad()));
    return r;
  };
  Result plain = once(false);
  EXPECT_TRUE(plain == once(true));
}

TEST_F(Checkpoint, RetainGraphRecomputesAgainAndASecondBackwardWithoutItIsRefused) {
  Mlp m(4, Device::cpu(), 5);
  Tensor x = randn({2, 4}).requires_grad_();
  Generator gen(2);
  auto fn = [&](const Tensor& in) { return m.forward(in, 0.5, gen); };
  gen.manual_seed(1);
  Tensor plain = sum(fn(x));
  plain.backward(Tensor(), true);
  plain.backward();
  std::vector<float> want = values(m.w1.grad());
  m.zero_grad();
  gen.manual_seed(1);
  Tensor y = sum(checkpoint(fn, x));
  y.backward(Tensor(), true);
  y.backward();
  EXPECT_EQ(values(m.w1.grad()), want);
  EXPECT_TIDE_ERROR(y.backward(), "[backward]", "'checkpoint'", "retain_graph");
}

TEST_F(Checkpoint, Errors) {
  Tensor x = randn({2, 3}).requires_grad_();
  EXPECT_TIDE_ERROR(checkpoint(CheckpointFn(), {x}), "[checkpoint]", "empty");
  EXPECT_TIDE_ERROR(checkpoint([](const Tensor&) { return Tensor(); }, x), "[checkpoint]",
                    "undefined tensor");
  EXPECT_TIDE_ERROR(checkpoint([](const Tensor& in) { return cast(in, DType::int64); }, x),
                    "[checkpoint]", "int64", "must be floating");
  EXPECT_TIDE_ERROR(checkpoint([](const std::vector<Tensor>& in) { return in[0]; }, {x, Tensor()}),
                    "[checkpoint]", "input 1 is undefined");
  test_util::fake_gpu(8);
  Tensor g = randn({2, 3}).to(Device::cuda(8));
  EXPECT_TIDE_ERROR(
      checkpoint([](const std::vector<Tensor>& in) { return add(in[0], in[0]); }, {x, g}),
      "[checkpoint]", "different devices", "input 1", "cuda:8");
}

TEST_F(Checkpoint, AnIntermediateReadByCaptureIsRefusedAtBackward) {
  Tensor w = randn({3}).requires_grad_();
  Tensor w2 = mul(w, 2.0);  // requires grad, not a leaf, not passed in
  Tensor x = randn({3}).requires_grad_();
  Tensor y = sum(checkpoint([&](const Tensor& in) { return mul(in, w2); }, x));
  EXPECT_TIDE_ERROR(y.backward(), "[checkpoint]", "computed outside", "'mul'", "as an input");
}

TEST_F(Checkpoint, ARecomputeThatDrawsOtherRandomNumbersIsRefused) {
  Tensor x = randn({4, 4}).requires_grad_();
  // Train mode in the first run, eval in the recompute: the dropout's draw is missing.
  bool training = true;
  Tensor y = sum(checkpoint([&](const Tensor& in) { return dropout(in, 0.5, training); }, x));
  training = false;
  EXPECT_TIDE_ERROR(y.backward(), "[checkpoint]", "made 0 random draws", "first run made 1",
                    "train/eval");
  // Another size in the recompute.
  int calls = 0;
  Tensor z = sum(
      checkpoint([&](const Tensor& in) { return add(in, sum(rand({++calls == 1 ? 3 : 5}))); }, x));
  EXPECT_TIDE_ERROR(z.backward(), "[checkpoint]", "random draw #1", "5 elements", "3 elements");
}

TEST_F(Checkpoint, ARecomputeOfAnotherShapeIsRefused) {
  Tensor x = randn({4, 4}).requires_grad_();
  int calls = 0;
  Tensor y =
      sum(checkpoint([&](const Tensor& in) { return ++calls == 1 ? in : in.slice(0, 2); }, x));
  EXPECT_TIDE_ERROR(y.backward(), "[checkpoint]", "(2, 4)", "(4, 4)");
}

// A traced step (forward, backward, an SGD update) with checkpointed blocks and dropout
// replays equal to the same step eager, step after step, and to the step without checkpoint.
void check_traced(Device device) {
  auto run = [&](bool traced, bool ckpt) {
    Mlp m(8, device, 6);
    Tensor x = data({4, 8}, 9, device);
    Generator gen(21);
    auto step = [&](const Tensor& in) {
      m.zero_grad();
      Tensor h = in;
      for (int i = 0; i < 2; ++i) {
        auto block = [&](const Tensor& t) { return m.forward(t, 0.2, gen); };
        h = ckpt ? checkpoint(block, h, m.params()) : block(h);
      }
      Tensor loss = mean(mul(h, h));
      loss.backward();
      NoGrad ng;
      for (Tensor p : m.params()) p.sub_(mul(p.grad(), 0.05));
      return loss.detach();
    };
    auto traced_step = trace::function(step, {.name = "ckpt_step", .warmup_calls = 1});
    std::vector<float> losses;
    for (int i = 0; i < 5; ++i) losses.push_back(values(traced ? traced_step(x) : step(x))[0]);
    if (traced) EXPECT_EQ(traced_step.stats().traces, 1);
    std::vector<float> w = values(m.w1);
    losses.insert(losses.end(), w.begin(), w.end());
    return losses;
  };
  std::vector<float> eager = run(false, true);
  EXPECT_EQ(eager, run(true, true));
  EXPECT_EQ(eager, run(false, false));
}

TEST_F(Checkpoint, TracedStepReplaysEqualToEager) { check_traced(Device::cpu()); }

TEST_F(Checkpoint, TracedStepReplaysEqualToEagerOnTheFakeGpu) {
  test_util::fake_gpu(8);
  check_traced(Device::cuda(8));
}

}  // namespace
}  // namespace tide
