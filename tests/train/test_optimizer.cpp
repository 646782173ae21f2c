// Optimizer golden values: each test runs a few steps on a 3-element parameter whose loss
// is sum(c * p²)/2 (gradient c*p, so it depends on the updated p) and compares with the
// PyTorch update formulas evaluated in double in the test itself. Also parameter groups,
// the global-norm gradient clip against a double reference, the warmup-cosine schedule
// against nanoGPT's formula, and that none of them waits.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <latch>
#include <memory>
#include <string>
#include <vector>

#include "error_of.h"
#include "nn/nn.h"
#include "tests/train_rig.h"
#include "tide.h"
#include "train/clip.h"
#include "train/optimizer.h"
#include "train/schedule.h"

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

// ---- parameter groups ------------------------------------------------------------------------

// One optimizer of each kind over groups {p: the options' weight decay}, {q: 0} gives p
// exactly the update of an optimizer with that decay, and q exactly that of one with none.
TEST(ParamGroups, NoDecayGroupUpdatesAsWeightDecayZero) {
  using Make = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>, double)>;
  const std::pair<const char*, Make> kinds[] = {
      {"sgd",
       [](std::vector<ParamGroup> g, double wd) {
         return std::make_unique<SGD>(std::move(g), SGDOptions(0.1).momentum(0.9).weight_decay(wd));
       }},
      {"adam",
       [](std::vector<ParamGroup> g, double wd) {
         return std::make_unique<Adam>(std::move(g), AdamOptions(0.1).weight_decay(wd));
       }},
      {"adamw", [](std::vector<ParamGroup> g, double wd) {
         return std::make_unique<AdamW>(std::move(g), AdamOptions(0.1).weight_decay(wd));
       }}};
  for (DType dt : {DType::float32, DType::float64})
    for (const auto& [kind, make] : kinds) {
      SCOPED_TRACE(std::string(kind) + " " + std::string(name(dt)));
      Tensor p = make_param(dt), q = make_param(dt);
      Tensor p_ref = make_param(dt), q_ref = make_param(dt), q_decayed = make_param(dt);
      // A decay of 2 flips the sign of c*p + wd*p where c = -1.5: Adam's update sees it.
      auto grouped = make({ParamGroup{{p}, std::nullopt}, ParamGroup{{q}, 0.0}}, 2.0);
      EXPECT_EQ(grouped->param_groups().size(), 2u);
      EXPECT_EQ(grouped->params().size(), 2u);
      auto with_decay = make({ParamGroup{{p_ref}, std::nullopt}}, 2.0);
      auto without = make({ParamGroup{{q_ref}, std::nullopt}}, 0.0);
      auto decayed = make({ParamGroup{{q_decayed}, std::nullopt}}, 2.0);
      for (int s = 0; s < 3; ++s)
        for (Optimizer* o : {grouped.get(), with_decay.get(), without.get(), decayed.get()}) {
          o->zero_grad();
          for (const Tensor& t : o->params()) backward_on(t);
          o->step();
        }
      EXPECT_EQ(p.to_vector<double>(), p_ref.to_vector<double>());
      EXPECT_EQ(q.to_vector<double>(), q_ref.to_vector<double>());
      EXPECT_NE(q.to_vector<double>(), q_decayed.to_vector<double>()) << "decay must matter";
    }
}

// The list constructors are one group with the options' decay, as before groups.
TEST(ParamGroups, ListConstructorIsOneGroupWithTheOptionsDecay) {
  Tensor p = make_param(), q = make_param();
  AdamW list({p}, AdamOptions(0.1).weight_decay(0.3));
  AdamW groups({ParamGroup{{q}, 0.3}}, AdamOptions(0.1));
  ASSERT_EQ(list.param_groups().size(), 1u);
  EXPECT_FALSE(list.param_groups()[0].weight_decay.has_value());
  for (int s = 0; s < 3; ++s) {
    list.zero_grad();
    groups.zero_grad();
    backward_on(p);
    backward_on(q);
    list.step();
    groups.step();
  }
  EXPECT_EQ(p.to_vector<double>(), q.to_vector<double>());
}

// nanoGPT's split: matmul weights decay, biases do not; a module used twice (tied) gives
// its parameters once.
TEST(ParamGroups, DecayGroupsSplitsByDimAndListsTiedParametersOnce) {
  Generator gen(3);
  auto lin0 = std::make_shared<nn::Linear>(nn::LinearOptions(4, 3), gen);
  auto shared = std::make_shared<nn::Linear>(nn::LinearOptions(3, 3), gen);
  nn::Sequential model;
  model.push_back(lin0);
  model.push_back(shared);
  model.push_back(shared);
  ASSERT_EQ(model.named_parameters().size(), 6u);
  std::vector<ParamGroup> g = decay_groups(model, 0.1);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].weight_decay, 0.1);
  EXPECT_EQ(g[1].weight_decay, 0.0);
  auto ids = [](const std::vector<Tensor>& ts) {
    std::vector<uintptr_t> v;
    for (const Tensor& t : ts) v.push_back(t.id());
    return v;
  };
  EXPECT_EQ(ids(g[0].params), (std::vector<uintptr_t>{lin0->weight().id(), shared->weight().id()}));
  EXPECT_EQ(ids(g[1].params), (std::vector<uintptr_t>{lin0->bias().id(), shared->bias().id()}));
  AdamW opt(g, AdamOptions(0.1));  // every parameter once: accepted
  EXPECT_EQ(opt.params().size(), 4u);
  EXPECT_NE(
      error_of([&] { decay_groups(model, -1); }).find("[decay_groups] invalid weight decay -1"),
      std::string::npos);
}

TEST(ParamGroups, BadGroups) {
  Tensor p = make_param(), q = make_param();
  std::string e = error_of([&] {
    AdamW({ParamGroup{{p}, 0.1}, ParamGroup{{q, p}, 0.0}}, AdamOptions());
  });
  EXPECT_NE(e.find("[adamw] parameter 2 (group 1) of shape (3,) is parameter 0 (group 0) too"),
            std::string::npos)
      << e;
  e = error_of([&] { SGD({ParamGroup{{p}, -0.5}}, SGDOptions(0.1)); });
  EXPECT_NE(e.find("[sgd] invalid weight decay -0.5 of parameter group 0"), std::string::npos) << e;
  e = error_of([&] { Adam({ParamGroup{}, ParamGroup{}}, AdamOptions()); });
  EXPECT_NE(e.find("[adam] empty parameter list"), std::string::npos) << e;
  Tensor plain = from_data(kP0, Shape{3});
  e = error_of([&] { Adam({ParamGroup{{p}}, ParamGroup{{plain}}}, AdamOptions()); });
  EXPECT_NE(e.find("[adam] parameter 1 (group 1) of shape (3,) is not a leaf that requires grad"),
            std::string::npos)
      << e;
  // One group (a list) words its errors as before groups.
  Tensor p64 = make_param(DType::float64);
  e = error_of([&] { Adam({p, p64}, AdamOptions()); });
  EXPECT_NE(e.find("[adam] parameter 1 has dtype float64 but parameter 0 has float32"),
            std::string::npos)
      << e;
  // Empty groups are fine next to others (decay_groups of a model without biases).
  SGD ok({ParamGroup{}, ParamGroup{{p}, 0.0}}, SGDOptions(0.1));
  EXPECT_EQ(ok.params().size(), 1u);
}

// ---- gradient clipping ----------------------------------------------------------------------

// Gradients c*p of kP0 (3) and of q0 (2x2): the global norm in double.
const std::vector<double> kQ0 = {0.5, 1.5, -1.0, 2.0};
const std::vector<double> kCq = {1.0, -2.0, 0.5, 3.0};

struct TwoParams {
  explicit TwoParams(DType dt = DType::float32, Device d = Device::cpu()) {
    p = from_data(kP0, Shape{3}, dt).to(d);
    q = from_data(kQ0, Shape{2, 2}, dt).to(d);
    p.requires_grad_();
    q.requires_grad_();
  }
  void backward() const {
    Tensor cp = from_data(kC, Shape{3}, p.dtype()).to(p.device());
    Tensor cq = from_data(kCq, Shape{2, 2}, q.dtype()).to(q.device());
    add(div(sum(mul(mul(cp, p), p)), 2.0), div(sum(mul(mul(cq, q), q)), 2.0)).backward();
  }
  std::vector<double> grads() const {  // c*p and cq*q in double
    std::vector<double> g;
    for (size_t i = 0; i < 3; ++i) g.push_back(kC[i] * kP0[i]);
    for (size_t i = 0; i < 4; ++i) g.push_back(kCq[i] * kQ0[i]);
    return g;
  }
  double norm() const {
    double ss = 0;
    for (double g : grads()) ss += g * g;
    return std::sqrt(ss);
  }
  Tensor p, q;
};

// PyTorch's clip_grad_norm_: below max_norm the gradients are left as they are (scale 1);
// above, scaled by max_norm / (norm + 1e-6); the norm before clipping is returned.
TEST(ClipGradNorm, MatchesTheDoubleReference) {
  for (DType dt : {DType::float32, DType::float64}) {
    SCOPED_TRACE(std::string(name(dt)));
    const double tol = dt == DType::float32 ? 1e-6 : 1e-14;
    TwoParams ref(dt);
    const double norm = ref.norm();  // sqrt(0.25 + 9 + 1 + 0.25 + 9 + 0.25 + 36) = 7.4666...
    for (double max_norm : {100.0, 7.0, 1.0}) {
      SCOPED_TRACE(max_norm);
      TwoParams t(dt);
      t.backward();
      std::vector<float> unclipped_p = t.p.grad().to_vector<float>();
      Tensor n = clip_grad_norm_({t.p, t.q}, max_norm);
      EXPECT_EQ(n.ndim(), 0);
      EXPECT_EQ(n.dtype(), dt);
      EXPECT_NEAR(n.item<double>(), norm, tol * norm);
      std::vector<double> got = t.p.grad().to_vector<double>();
      for (double x : t.q.grad().to_vector<double>()) got.push_back(x);
      const double scale = std::min(1.0, max_norm / (norm + 1e-6));
      std::vector<double> want = ref.grads();
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(got[i], want[i] * scale, tol * std::abs(want[i])) << "element " << i;
      if (max_norm > norm)  // scale exactly 1: the gradients' bits are unchanged
        EXPECT_EQ(t.p.grad().to_vector<float>(), unclipped_p);
    }
  }
}

TEST(ClipGradNorm, SkipsParametersWithoutGradientsAndRefusesBadArguments) {
  TwoParams t;
  backward_on(t.p);  // q gets no gradient
  Tensor n = clip_grad_norm_({t.p, t.q}, 1.0);
  EXPECT_NEAR(n.item<double>(), std::sqrt(0.25 + 9 + 1), 1e-6);
  EXPECT_FALSE(t.q.grad().defined());
  TwoParams none;
  EXPECT_EQ(clip_grad_norm_({none.p, none.q}, 1.0).item<double>(), 0.0);
  EXPECT_EQ(grad_norm({}).item<double>(), 0.0);
  EXPECT_NE(error_of([&] {
              clip_grad_norm_({t.p}, 0.0);
            }).find("[clip_grad_norm_] invalid max_norm 0 (expected a value > 0)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              clip_grad_norm_({t.p, Tensor()}, 1.0);
            }).find("[clip_grad_norm_] parameter 1 is undefined"),
            std::string::npos);
  TwoParams d64(DType::float64);
  d64.backward();
  std::string e = error_of([&] { grad_norm({t.p, d64.q}); });
  EXPECT_NE(e.find("[clip_grad_norm_] the gradient of parameter 1 is float64 on cpu but that of "
                   "parameter 0 is float32 on cpu"),
            std::string::npos)
      << e;
  Tensor p = make_param();
  SGD opt({p}, SGDOptions(0.1));
  EXPECT_NE(error_of([&] { opt.clip_grad_norm(-1); }).find("[sgd] invalid max_norm -1"),
            std::string::npos);
}

// Optimizer::clip_grad_norm scales the gradients inside the update: the parameters equal
// clip_grad_norm_ followed by step() bit for bit, while p.grad() keeps the unclipped values.
TEST(ClipGradNorm, FusedIntoTheStepEqualsClippingTheGradients) {
  using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;
  const std::pair<const char*, Make> kinds[] = {
      {"sgd",
       [](std::vector<Tensor> ps) {
         return std::make_unique<SGD>(ps, SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
       }},
      {"sgd plain",
       [](std::vector<Tensor> ps) { return std::make_unique<SGD>(ps, SGDOptions(0.1)); }},
      {"adam",
       [](std::vector<Tensor> ps) {
         return std::make_unique<Adam>(ps, AdamOptions(0.1).weight_decay(0.05));
       }},
      {"adamw", [](std::vector<Tensor> ps) {
         return std::make_unique<AdamW>(ps, AdamOptions(0.1).weight_decay(0.05));
       }}};
  for (DType dt : {DType::float32, DType::float64})
    for (const auto& [kind, make] : kinds) {
      SCOPED_TRACE(std::string(kind) + " " + std::string(name(dt)));
      TwoParams a(dt), b(dt), c(dt);  // fused, in place, unclipped
      auto oa = make({a.p, a.q}), ob = make({b.p, b.q}), oc = make({c.p, c.q});
      for (int s = 0; s < 4; ++s) {
        for (TwoParams* t : {&a, &b, &c}) {
          t->p.zero_grad();
          t->q.zero_grad();
          t->backward();
        }
        const double max_norm = s % 2 ? 100.0 : 1.5;  // clips on steps 0 and 2
        std::vector<double> before = a.p.grad().to_vector<double>();
        Tensor na = oa->clip_grad_norm(max_norm), nb = clip_grad_norm_({b.p, b.q}, max_norm);
        EXPECT_EQ(na.item<double>(), nb.item<double>()) << "norm at step " << s;
        oa->step();
        ob->step();
        oc->step();
        EXPECT_EQ(a.p.grad().to_vector<double>(), before) << "the gradients are left alone";
        EXPECT_EQ(a.p.to_vector<double>(), b.p.to_vector<double>()) << "step " << s;
        EXPECT_EQ(a.q.to_vector<double>(), b.q.to_vector<double>()) << "step " << s;
      }
      EXPECT_NE(a.p.to_vector<double>(), c.p.to_vector<double>()) << "the clip must matter";
    }
}

// The scale applies to the next step only; zero_grad drops a pending one.
TEST(ClipGradNorm, FusedScaleAppliesToTheNextStepOnly) {
  TwoParams a, b;
  SGD oa({a.p, a.q}, SGDOptions(0.1)), ob({b.p, b.q}, SGDOptions(0.1));
  auto backward_both = [&] {
    oa.zero_grad();
    ob.zero_grad();
    a.backward();
    b.backward();
  };
  backward_both();
  oa.clip_grad_norm(1.0);
  clip_grad_norm_({b.p, b.q}, 1.0);
  oa.step();
  ob.step();
  EXPECT_EQ(a.p.to_vector<float>(), b.p.to_vector<float>()) << "clipped step";
  backward_both();
  oa.step();  // the scale was taken by the step before: unclipped
  ob.step();
  EXPECT_EQ(a.p.to_vector<float>(), b.p.to_vector<float>()) << "the step after";
  oa.clip_grad_norm(1.0);
  backward_both();  // zero_grad drops the gradients and the pending scale
  oa.step();
  ob.step();
  EXPECT_EQ(a.p.to_vector<float>(), b.p.to_vector<float>()) << "after zero_grad";
}

// ---- learning-rate schedule -----------------------------------------------------------------

// nanoGPT's get_lr, written out as its train.py has it, for the reference.
double nanogpt_lr(int64_t it, double lr, double min_lr, int64_t warmup, int64_t decay) {
  if (it < warmup) return lr * double(it + 1) / double(warmup + 1);
  if (it > decay) return min_lr;
  double ratio = double(it - warmup) / double(decay - warmup);
  return min_lr + 0.5 * (1.0 + std::cos(3.141592653589793 * ratio)) * (lr - min_lr);
}

// 30 steps across the warmup, the cosine and the floor: the lr each step reads is the host
// formula's (rounded to the parameters' dtype), and the updates use it (plain SGD: p -= lr g).
TEST(WarmupCosine, ThirtyStepsFollowTheHostFormula) {
  const WarmupCosineOptions o{0.1, 0.01, 5, 20};
  for (DType dt : {DType::float32, DType::float64})
    for (bool adam : {false, true}) {
      SCOPED_TRACE(std::string(adam ? "adamw " : "sgd ") + std::string(name(dt)));
      Tensor p = make_param(dt);
      std::unique_ptr<Optimizer> opt;
      if (adam) opt = std::make_unique<AdamW>(std::vector<Tensor>{p}, AdamOptions(0.1));
      else opt = std::make_unique<SGD>(std::vector<Tensor>{p}, SGDOptions(0.1));
      WarmupCosine sched(*opt, o);
      RefSGD ref{0, 0, 0, 0, false};
      for (int it = 0; it < 30; ++it) {
        opt->zero_grad();
        backward_on(p);
        sched.step();
        opt->step();
        const double want = nanogpt_lr(it, 0.1, 0.01, 5, 20);
        EXPECT_DOUBLE_EQ(sched.lr_at(it), want) << "it " << it;
        if (dt == DType::float32) {
          EXPECT_FLOAT_EQ(opt->lr_tensor().item<float>(), float(want)) << "it " << it;
        } else {
          EXPECT_NEAR(opt->lr_tensor().item<double>(), want, 1e-15 * want) << "it " << it;
        }
        ref.lr = dt == DType::float32 ? double(float(want)) : want;
        ref.step();
        if (!adam) expect_near(p, ref.p, dt == DType::float32 ? 1e-6 : 1e-13);
      }
      EXPECT_EQ(opt->step_tensor().item<int64_t>(), 30);
    }
}

TEST(WarmupCosine, LrAtEdgesAndBadOptions) {
  Tensor p = make_param();
  SGD opt({p}, SGDOptions(1.0));
  WarmupCosine no_warmup(opt, WarmupCosineOptions{1.0, 0.1, 0, 10});
  EXPECT_DOUBLE_EQ(no_warmup.lr_at(0), 1.0);
  EXPECT_DOUBLE_EQ(no_warmup.lr_at(5), 0.55);
  EXPECT_DOUBLE_EQ(no_warmup.lr_at(10), 0.1);
  EXPECT_DOUBLE_EQ(no_warmup.lr_at(1000), 0.1);
  // warmup == decay_steps: min_lr right after the warmup (nanoGPT divides 0 by 0 there).
  WarmupCosine step_down(opt, WarmupCosineOptions{1.0, 0.1, 4, 4});
  EXPECT_DOUBLE_EQ(step_down.lr_at(3), 0.8);
  EXPECT_DOUBLE_EQ(step_down.lr_at(4), 0.1);
  EXPECT_NE(error_of([&] {
              WarmupCosine(opt, WarmupCosineOptions{0.1, 0.5, 1, 2});
            }).find("[warmup_cosine_lr_] invalid lr 0.1 and min_lr 0.5"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              WarmupCosine(opt, WarmupCosineOptions{0.1, 0.0, 3, 2});
            }).find("[warmup_cosine_lr_] invalid warmup 3 and decay_steps 2"),
            std::string::npos);
}

// SGD keeps no step tensor until asked (its steps queue one op per parameter, as before);
// once asked, it holds the steps taken and each step queues its increment.
TEST(SGD, StepTensorCountsOnceAsked) {
  SynchronousGuard async(false);  // ops run inline are not counted
  Tensor p = make_param();
  SGD opt({p}, SGDOptions(0.1));
  auto queued_by_step = [&] {
    opt.zero_grad();
    backward_on(p);
    uint64_t before = Engine::get().stats().queued;
    opt.step();
    return Engine::get().stats().queued - before;
  };
  EXPECT_EQ(queued_by_step(), 1u);
  EXPECT_EQ(queued_by_step(), 1u);
  EXPECT_EQ(opt.step_tensor().item<int64_t>(), 2);
  EXPECT_EQ(queued_by_step(), 2u);
  EXPECT_EQ(opt.step_tensor().item<int64_t>(), 3);
  EXPECT_EQ(opt.step_tensor().dtype(), DType::int64);
}

// ---- no host sync ---------------------------------------------------------------------------

// The clip (both forms), the schedule and the step queue everything and wait for nothing:
// with the worker held by a gate queued first, they all return; the gate is released only
// after them. Had one waited, it would have waited for the gate: the gate's body then times
// out, and the test fails on that instead of hanging.
TEST(ClipGradNorm, ClipScheduleAndStepNeverWait) {
  SynchronousGuard async(false);  // the gate must run on the worker
  TwoParams a, b;
  AdamW oa({a.p, a.q}, AdamOptions(0.1).weight_decay(0.1));
  SGD ob({b.p, b.q}, SGDOptions(0.1).momentum(0.9));
  WarmupCosine sa(oa, WarmupCosineOptions{0.1, 0.01, 2, 10}),
      sb(ob, WarmupCosineOptions{0.1, 0.01, 2, 10});
  for (int s = 0; s < 3; ++s) {
    oa.zero_grad();
    ob.zero_grad();
    Tensor na, nb;
    ASSERT_TRUE(test_util::queues_without_waiting([&] {
      a.backward();  // the worker is held: none of this has run yet
      b.backward();
      na = oa.clip_grad_norm(1.0);
      nb = clip_grad_norm_({b.p, b.q}, 1.0);
      sa.step();
      sb.step();
      oa.step();
      ob.step();
    })) << "a call waited for queued work (step "
        << s << ")";
    EXPECT_GT(na.item<double>(), 1.0);
    EXPECT_GT(nb.item<double>(), 1.0);
  }
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
