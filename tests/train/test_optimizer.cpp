// Optimizer golden values: each test runs a few steps on a 3-element parameter whose loss
// is sum(c * p²)/2 (gradient c*p, so it depends on the updated p) and compares with the
// PyTorch update formulas evaluated in double in the test itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <latch>
#include <memory>
#include <string>
#include <vector>

#include "error_of.h"
#include "tide.h"
#include "train/optimizer.h"

using namespace tide;
using namespace tide::train;

namespace {

const std::vector<double> kP0 = {1.0, -2.0, 0.5};
const std::vector<double> kC = {0.5, -1.5, 2.0};

Tensor make_param(DType dt = DType::float32) {
  Tensor p = from_data(kP0, Shape{3}, dt);
  p.requires_grad_();
  return p;
}

// Queues loss = sum(c * p * p) / 2 and its backward; grad = c * p.
void backward_on(const Tensor& p) {
  Tensor c = from_data(kC, Shape{3}, p.dtype());
  Tensor loss = div(sum(mul(mul(c, p), p)), 2.0);
  loss.backward();
}

void expect_near(const Tensor& p, const std::vector<double>& want, double tol) {
  std::vector<double> got = p.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

struct RefSGD {
  double lr, m, damp, wd;
  bool nesterov;
  std::vector<double> p = kP0, buf;
  void step() {
    for (size_t i = 0; i < p.size(); ++i) {
      double g = kC[i] * p[i] + wd * p[i];
      if (m != 0) {
        if (buf.size() < p.size()) buf.push_back(g);
        else buf[i] = m * buf[i] + (1 - damp) * g;
        g = nesterov ? g + m * buf[i] : buf[i];
      }
      p[i] -= lr * g;
    }
  }
};

struct RefAdam {
  double lr, b1, b2, eps, wd;
  bool decoupled;
  int t = 0;
  std::vector<double> p = kP0, m = {0, 0, 0}, v = {0, 0, 0};
  void step() {
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = kC[i] * p[i];
      if (decoupled) p[i] *= 1 - lr * wd;
      else g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
    }
  }
};

using tide::test_util::error_of;

}  // namespace

TEST(SGD, PlainStepByHand) {
  Tensor p = make_param();
  SGD opt({p}, SGDOptions(0.1));
  backward_on(p);
  opt.step();
  // g = c*p = (0.5, 3, 1); p - 0.1*g.
  expect_near(p, {0.95, -2.3, 0.4}, 1e-6);
  EXPECT_EQ(opt.step_count(), 1);
}

TEST(SGD, MomentumNesterovWeightDecayThreeSteps) {
  for (DType dt : {DType::float32, DType::float64}) {
    Tensor p = make_param(dt);
    SGD opt({p}, SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01));
    RefSGD ref{0.1, 0.9, 0, 0.01, true};
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      backward_on(p);
      opt.step();
      ref.step();
      expect_near(p, ref.p, dt == DType::float32 ? 1e-6 : 1e-12);
    }
  }
}

TEST(SGD, MomentumWithDampening) {
  Tensor p = make_param();
  SGD opt({p}, SGDOptions(0.05).momentum(0.8).dampening(0.3));
  RefSGD ref{0.05, 0.8, 0.3, 0, false};
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    backward_on(p);
    opt.step();
    ref.step();
  }
  expect_near(p, ref.p, 1e-6);
}

TEST(SGD, SetLrTakesEffectAtNextStep) {
  Tensor p = make_param();
  SGD opt({p}, SGDOptions(0.1).momentum(0.5));
  RefSGD ref{0.1, 0.5, 0, 0, false};
  opt.zero_grad();
  backward_on(p);
  opt.step();
  ref.step();
  opt.set_lr(0.02);  // queued after step 1, before step 2
  EXPECT_DOUBLE_EQ(opt.lr(), 0.02);
  ref.lr = 0.02;
  for (int s = 0; s < 2; ++s) {
    opt.zero_grad();
    backward_on(p);
    opt.step();
    ref.step();
  }
  expect_near(p, ref.p, 1e-6);
  EXPECT_NEAR(opt.lr_tensor().item<double>(), 0.02, 1e-9);
  EXPECT_EQ(opt.lr_tensor().ndim(), 0);
}

TEST(SGD, SkipsParametersWithoutGrad) {
  Tensor p = make_param();
  Tensor q = make_param();
  SGD opt({p, q}, SGDOptions(0.1).momentum(0.9));
  backward_on(p);  // q gets no gradient
  opt.step();
  expect_near(q, kP0, 0);
  expect_near(p, {0.95, -2.3, 0.4}, 1e-6);
}

TEST(SGD, ZeroGradDropsGradients) {
  Tensor p = make_param();
  SGD opt({p}, SGDOptions(0.1));
  backward_on(p);
  EXPECT_TRUE(p.grad().defined());
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
  opt.step();  // nothing to do
  expect_near(p, kP0, 0);
}

TEST(SGD, BadHyperParameters) {
  Tensor p = make_param();
  EXPECT_NE(error_of([&] { SGD({p}, SGDOptions(-0.1)); }).find("[sgd] invalid learning rate"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { SGD({p}, SGDOptions(0.1).momentum(-1)); }).find("[sgd] invalid momentum"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              SGD({p}, SGDOptions(0.1).weight_decay(-1));
            }).find("[sgd] invalid weight decay"),
            std::string::npos);
  EXPECT_NE(error_of([&] { SGD({p}, SGDOptions(0.1).nesterov(true)); }).find("[sgd] Nesterov"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              SGD({p}, SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true));
            }).find("[sgd] Nesterov"),
            std::string::npos);
  EXPECT_NE(error_of([&] { SGD({}, SGDOptions(0.1)); }).find("[sgd] empty parameter list"),
            std::string::npos);
  Tensor no_grad = from_data(kP0, Shape{3});
  EXPECT_NE(error_of([&] { SGD({no_grad}, SGDOptions(0.1)); }).find("[sgd] parameter 0"),
            std::string::npos);
  Tensor p64 = make_param(DType::float64);
  EXPECT_NE(error_of([&] {
              SGD({p, p64}, SGDOptions(0.1));
            }).find("[sgd] parameter 1"),
            std::string::npos);
  SGD ok({p}, SGDOptions(0.1));
  EXPECT_NE(error_of([&] { ok.set_lr(-1); }).find("[sgd] invalid learning rate"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(ok.lr(), 0.1);
}

TEST(Adam, ThreeSteps) {
  for (DType dt : {DType::float32, DType::float64}) {
    Tensor p = make_param(dt);
    Adam opt({p}, AdamOptions(0.1).betas(0.8, 0.95).eps(1e-6).weight_decay(0.05));
    RefAdam ref{0.1, 0.8, 0.95, 1e-6, 0.05, false};
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      backward_on(p);
      opt.step();
      ref.step();
      expect_near(p, ref.p, dt == DType::float32 ? 1e-6 : 1e-12);
    }
    EXPECT_EQ(opt.step_tensor().item<int64_t>(), 3);
    EXPECT_EQ(opt.step_tensor().dtype(), DType::int64);
    EXPECT_EQ(opt.step_tensor().ndim(), 0);
  }
}

TEST(Adam, FirstStepByHand) {
  // Bias-corrected first step is lr * g / (|g| + eps') ≈ lr * sign(g).
  Tensor p = make_param();
  Adam opt({p}, AdamOptions(0.01));
  backward_on(p);
  opt.step();
  // g = c*p = (0.5, 3, 1): every element moves down by lr.
  expect_near(p, {1.0 - 0.01, -2.0 - 0.01, 0.5 - 0.01}, 1e-6);
}

TEST(AdamW, ThreeStepsWithLrChange) {
  for (DType dt : {DType::float32, DType::float64}) {
    Tensor p = make_param(dt);
    AdamW opt({p}, AdamOptions(0.1).betas(0.9, 0.99).eps(1e-8).weight_decay(0.1));
    RefAdam ref{0.1, 0.9, 0.99, 1e-8, 0.1, true};
    for (int s = 0; s < 3; ++s) {
      if (s == 2) {
        opt.set_lr(0.03);
        ref.lr = 0.03;
      }
      opt.zero_grad();
      backward_on(p);
      opt.step();
      ref.step();
      expect_near(p, ref.p, dt == DType::float32 ? 1e-6 : 1e-12);
    }
  }
}

TEST(Adam, BadHyperParameters) {
  Tensor p = make_param();
  EXPECT_NE(error_of([&] { Adam({p}, AdamOptions(-1)); }).find("[adam] invalid learning rate"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { Adam({p}, AdamOptions(0.1).betas(1.0, 0.9)); }).find("[adam] invalid beta1"),
      std::string::npos);
  EXPECT_NE(
      error_of([&] { Adam({p}, AdamOptions(0.1).betas(0.9, -0.1)); }).find("[adam] invalid beta2"),
      std::string::npos);
  EXPECT_NE(error_of([&] { Adam({p}, AdamOptions(0.1).eps(-1)); }).find("[adam] invalid eps"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              AdamW({p}, AdamOptions(0.1).weight_decay(-1));
            }).find("[adamw] invalid weight decay"),
            std::string::npos);
}

TEST(Adam, SkipsParametersWithoutGrad) {
  Tensor p = make_param();
  Tensor q = make_param();
  AdamW opt({p, q}, AdamOptions(0.1).weight_decay(0.5));
  backward_on(p);
  opt.step();
  expect_near(q, kP0, 0);  // not even decayed
}

// ---- queued ops per step ---------------------------------------------------------------------

// Fused updates: one queued op per parameter with a gradient, plus Adam's step counter;
// parameters without a gradient queue nothing. From the first step on (the state is
// allocated without a fill). The composed updates this replaced queued 4-11 per parameter.
TEST(Optimizer, OneQueuedOpPerParameterPerStep) {
  SynchronousGuard async(false);  // ops run inline (TIDE_ENGINE=sync) are not counted
  auto make = [] {
    std::vector<Tensor> ps;
    for (Shape s : {Shape{4, 3}, Shape{3}, Shape{70000}, Shape{5}}) {
      Tensor p = randn(s);
      p.requires_grad_();
      ps.push_back(p);
    }
    return ps;
  };
  auto backward_on_first3 = [](const std::vector<Tensor>& ps) {
    Tensor loss = sum(mul(ps[0], ps[0]));
    for (int i = 1; i < 3; ++i) loss = add(loss, sum(mul(ps[i], ps[i])));
    loss.backward();  // ps[3] gets no gradient
  };
  struct Case {
    const char* name;
    std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)> make;
    uint64_t extra;  // the step counter
  };
  std::vector<Case> cases{
      {"sgd", [](auto ps) { return std::make_unique<SGD>(ps, SGDOptions(0.1)); }, 0},
      {"sgd momentum nesterov wd",
       [](auto ps) {
         return std::make_unique<SGD>(
             ps, SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01));
       },
       0},
      {"adam wd",
       [](auto ps) { return std::make_unique<Adam>(ps, AdamOptions(0.1).weight_decay(0.1)); }, 1},
      {"adamw",
       [](auto ps) { return std::make_unique<AdamW>(ps, AdamOptions(0.1).weight_decay(0.1)); }, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> ps = make();
    std::unique_ptr<Optimizer> opt = c.make(ps);
    for (int s = 0; s < 3; ++s) {
      opt->zero_grad();
      backward_on_first3(ps);
      uint64_t before = Engine::get().stats().queued;
      opt->step();
      EXPECT_EQ(Engine::get().stats().queued - before, 3 + c.extra) << "step " << s + 1;
    }
    wait_all();
  }
}

// The optimizers read lr and t from memory when the kernels run: a step queued before a
// write to lr_tensor() that lands before it runs uses the new value (what a replayed,
// traced step relies on).
TEST(Adam, LrTensorWrittenBeforeTheKernelRunsIsUsed) {
  SynchronousGuard async(false);  // the gate must run on the worker
  Tensor p = make_param(DType::float64);
  Adam opt({p}, AdamOptions(0.1));
  backward_on(p);
  std::latch release(1);
  debug::gate(opt.lr_tensor(), [&] {
    release.wait();
    *opt.lr_tensor().data<double>() = 0.02;
  });
  opt.step();
  release.count_down();
  // First step, eps negligible: every element moves down by lr (g > 0 everywhere).
  expect_near(p, {1.0 - 0.02, -2.0 - 0.02, 0.5 - 0.02}, 1e-9);
  EXPECT_EQ(opt.step_tensor().item<int64_t>(), 1);
}

// ---- timing (not a correctness test) ---------------------------------------------------------

// One Adam step over the textbook MLP's parameters (512x2048, 2048, 2048x512, 512, 512x1, 1:
// 2.1 M float32 elements), timed step + wait_all, median of 7 samples of 10 steps. Runs only
// with TIDE_BENCH=1 (the machine is noisy; the numbers go to the report, not to a bound).
// Napkin math: the fused update reads p, g, m, v and writes p, m, v: 28 bytes per element.
TEST(OptimizerBench, AdamStepOnTextbookMlp) {
  if (!std::getenv("TIDE_BENCH")) GTEST_SKIP() << "set TIDE_BENCH=1 to run";
  std::vector<Shape> shapes{{512, 2048}, {2048}, {2048, 512}, {512}, {512, 1}, {1}};
  std::vector<Tensor> params;
  int64_t numel = 0;
  for (const Shape& s : shapes) {
    Tensor p = randn(s);
    p.requires_grad_();
    sum(mul(p, p)).backward();  // a gradient that stays for every step
    params.push_back(p);
    numel += s.numel();
  }
  Adam opt(params, AdamOptions(1e-3).weight_decay(1e-4));
  for (int i = 0; i < 5; ++i) opt.step();  // warm-up: state and allocator cache
  wait_all();
  auto median_ms = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const int kSteps = 10, kSamples = 7;
  std::vector<double> samples;
  for (int s = 0; s < kSamples; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kSteps; ++i) opt.step();
    wait_all();
    auto t1 = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / kSteps);
  }
  // The memory-bandwidth limit in the same run: memcpy of the same 28 bytes per element.
  std::vector<char> src(size_t(numel) * 28 / 2, 1), dst(src.size());
  std::vector<double> copy_samples;
  for (int s = 0; s < kSamples; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kSteps; ++i) {
      std::memcpy(dst.data(), src.data(), src.size());
      asm volatile("" ::: "memory");
    }
    auto t1 = std::chrono::steady_clock::now();
    copy_samples.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / kSteps);
  }
  double ms = median_ms(samples), copy_ms = median_ms(copy_samples);
  double gb = double(numel) * 28 / 1e9;
  std::printf("adam step: %lld elements, median %.3f ms (samples:", (long long)numel, ms);
  for (double x : samples) std::printf(" %.3f", x);
  std::printf("), %.2f GB/s; memcpy of the same bytes: %.3f ms, %.2f GB/s\n", gb / ms * 1e3,
              copy_ms, gb / copy_ms * 1e3);
}
