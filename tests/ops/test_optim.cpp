// The fused optimizer ops (ops/optim.h): sgd_update_ and adam_update_ against plain
// double-precision loops over several steps (lr changed between steps, fresh state on the
// first), for float32 and float64 and sizes on both sides of the thread-pool grain;
// increment_; that lr and the step are read when the kernel runs, not at enqueue; failure
// propagation; and the argument errors, which must throw before anything is queued. Then
// the grad scale (a clip fused into the update) and the warmup_cosine_lr_ schedule.
// Not here: the optimizers built on them (tests/train/test_optimizer.cpp). The generic
// harness does not fit (several in-place outputs), so these are hand-written TIDE_OP_TESTs.
#include <cmath>
#include <latch>
#include <random>
#include <thread>

#include "ops/op_util.h"
#include "tests/ops/op_harness.h"

namespace tide {
namespace {

using test::Check;

// Sizes: empty, one element, odd, and past kParallelGrain (the thread-pool split).
const std::vector<Shape> kShapes{Shape{0}, Shape{}, Shape{7}, Shape{3, 5},
                                 Shape{2, detail::kParallelGrain + 123}};
const double kLrs[] = {0.1, 0.05, 0.2, 0.01};  // one per step: lr changes between steps

std::vector<double> random_values(std::mt19937& rng, int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = d(rng);
  return v;
}

// Values as the tensor holds them (float32 rounding), for the reference.
std::vector<double> rounded(const std::vector<double>& v, DType dt) {
  std::vector<double> r(v);
  if (dt == DType::float32)
    for (double& x : r) x = double(float(x));
  return r;
}

void expect_close(const Tensor& t, const std::vector<double>& want, DType dt,
                  const std::string& what) {
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size()) << what;
  double atol = dt == DType::float32 ? 2e-6 : 1e-13;
  double rtol = dt == DType::float32 ? 2e-5 : 1e-11;
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (std::abs(got[i] - want[i]) > atol + rtol * std::abs(want[i])) {
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", want " << want[i];
      ++bad;
    }
  }
}

struct SgdCfg {
  double momentum, dampening, wd;
  bool nesterov;
};

TIDE_OP_TEST(Optim, SgdUpdateMatchesDoubleLoop, {OpId::sgd_update_, Check::value}) {
  const SgdCfg cfgs[] = {{0, 0, 0, false},
                         {0, 0, 0.01, false},
                         {0.9, 0, 0, false},
                         {0.8, 0.3, 0.02, false},
                         {0.9, 0, 0.01, true}};
  std::mt19937 rng(7);
  for (DType dt : {DType::float32, DType::float64})
    for (const Shape& shape : kShapes)
      for (const SgdCfg& c : cfgs) {
        std::string what = shape.str() + " " + std::string(name(dt)) + " momentum " +
                           std::to_string(c.momentum) + " dampening " +
                           std::to_string(c.dampening) + " wd " + std::to_string(c.wd) +
                           (c.nesterov ? " nesterov" : "");
        SCOPED_TRACE(what);
        int64_t n = shape.numel();
        std::vector<double> p = rounded(random_values(rng, n, -2, 2), dt),
                            buf(static_cast<size_t>(n));
        Tensor tp = from_data(p, shape, dt);
        Tensor tbuf = c.momentum != 0 ? Tensor::empty(shape, dt) : Tensor();
        Tensor lr = full(Shape{}, kLrs[0], dt);
        SgdUpdateOptions o = SgdUpdateOptions()
                                 .momentum(c.momentum)
                                 .dampening(c.dampening)
                                 .nesterov(c.nesterov)
                                 .weight_decay(c.wd);
        for (int s = 0; s < 4; ++s) {
          std::vector<double> g = rounded(random_values(rng, n, -1, 1), dt);
          double lrv = dt == DType::float32 ? double(float(kLrs[s])) : kLrs[s];
          if (s > 0) lr.copy_(full(Shape{}, kLrs[s], dt));
          sgd_update_(tp, from_data(g, shape, dt), tbuf, lr,
                      SgdUpdateOptions(o).fresh_state(s == 0));
          for (int64_t i = 0; i < n; ++i) {
            double gi = g[i] + c.wd * p[i];
            if (c.momentum != 0) {
              buf[i] = s == 0 ? gi : c.momentum * buf[i] + (1 - c.dampening) * gi;
              gi = c.nesterov ? gi + c.momentum * buf[i] : buf[i];
            }
            p[i] -= lrv * gi;
          }
          expect_close(tp, p, dt, "param after step " + std::to_string(s + 1));
          if (c.momentum != 0) expect_close(tbuf, buf, dt, "momentum_buf");
        }
      }
}

struct AdamCfg {
  double b1, b2, eps, wd;
  bool decoupled;
};

TIDE_OP_TEST(Optim, AdamUpdateMatchesDoubleLoop, {OpId::adam_update_, Check::value},
             {OpId::increment_, Check::value}) {
  const AdamCfg cfgs[] = {{0.9, 0.999, 1e-8, 0, false},
                          {0.8, 0.95, 1e-6, 0.05, false},
                          {0.9, 0.99, 1e-8, 0.1, true},
                          {0.0, 0.5, 1e-3, 0, true}};
  std::mt19937 rng(11);
  for (DType dt : {DType::float32, DType::float64})
    for (const Shape& shape : kShapes)
      for (const AdamCfg& c : cfgs) {
        std::string what = shape.str() + " " + std::string(name(dt)) + " betas " +
                           std::to_string(c.b1) + "/" + std::to_string(c.b2) + " wd " +
                           std::to_string(c.wd) + (c.decoupled ? " adamw" : " adam");
        SCOPED_TRACE(what);
        int64_t n = shape.numel();
        std::vector<double> p = rounded(random_values(rng, n, -2, 2), dt);
        std::vector<double> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
        Tensor tp = from_data(p, shape, dt);
        Tensor tm = Tensor::empty(shape, dt), tv = Tensor::empty(shape, dt);
        Tensor lr = full(Shape{}, kLrs[0], dt);
        Tensor step = zeros(Shape{}, DType::int64);
        AdamUpdateOptions o = AdamUpdateOptions()
                                  .betas(c.b1, c.b2)
                                  .eps(c.eps)
                                  .weight_decay(c.wd)
                                  .decoupled(c.decoupled);
        for (int s = 0; s < 4; ++s) {
          std::vector<double> g = rounded(random_values(rng, n, -1, 1), dt);
          double lrv = dt == DType::float32 ? double(float(kLrs[s])) : kLrs[s];
          if (s > 0) lr.copy_(full(Shape{}, kLrs[s], dt));
          increment_(step);
          adam_update_(tp, from_data(g, shape, dt), tm, tv, lr, step,
                       AdamUpdateOptions(o).fresh_state(s == 0));
          int t = s + 1;
          for (int64_t i = 0; i < n; ++i) {
            double gi = g[i];
            if (c.decoupled) p[i] *= 1 - lrv * c.wd;
            else gi += c.wd * p[i];
            m[i] = c.b1 * m[i] + (1 - c.b1) * gi;
            v[i] = c.b2 * v[i] + (1 - c.b2) * gi * gi;
            double bc1 = 1 - std::pow(c.b1, t), bc2 = 1 - std::pow(c.b2, t);
            p[i] -= lrv / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + c.eps);
          }
          expect_close(tp, p, dt, "param after step " + std::to_string(t));
          expect_close(tm, m, dt, "m");
          expect_close(tv, v, dt, "v");
        }
        EXPECT_EQ(step.item<int64_t>(), 4);
      }
}

// The fused kernels keep the composed ops' order of operations (ops/functors.h), so they
// give the same bits as the add_/mul_/... sequence the optimizers queued before, given the
// same bias-correction factors (now computed in double from t, as below).
TEST(Optim, FusedMatchesComposedOpsBitwise) {
  std::mt19937 rng(3);
  for (DType dt : {DType::float32, DType::float64}) {
    SCOPED_TRACE(std::string(name(dt)));
    Shape shape{3, detail::kParallelGrain / 2 + 7};
    int64_t n = shape.numel();
    Tensor lr = full(Shape{}, 0.05, dt);
    NoGrad ng;
    // SGD: momentum, dampening, weight decay; then Nesterov.
    for (bool nesterov : {false, true}) {
      double mom = 0.9, damp = nesterov ? 0.0 : 0.25, wd = 0.01;
      Tensor p = from_data(random_values(rng, n, -2, 2), shape, dt), q = clone(p);
      Tensor buf = Tensor::empty(shape, dt), qbuf;
      for (int s = 0; s < 3; ++s) {
        Tensor g = from_data(random_values(rng, n, -1, 1), shape, dt);
        sgd_update_(p, g, buf, lr,
                    SgdUpdateOptions()
                        .momentum(mom)
                        .dampening(damp)
                        .nesterov(nesterov)
                        .weight_decay(wd)
                        .fresh_state(s == 0));
        Tensor gq = add(g, mul(q, wd));
        if (s == 0) {
          qbuf = clone(gq);
        } else {
          qbuf.mul_(mom);
          qbuf.add_(gq, 1.0 - damp);
        }
        gq = nesterov ? add(gq, mul(qbuf, mom)) : qbuf;
        q.sub_(mul(gq, lr));
      }
      EXPECT_EQ(p.to_vector<double>(), q.to_vector<double>()) << "sgd nesterov " << nesterov;
      EXPECT_EQ(buf.to_vector<double>(), qbuf.to_vector<double>());
    }
    // Adam and AdamW.
    for (bool decoupled : {false, true}) {
      double b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
      Tensor p = from_data(random_values(rng, n, -2, 2), shape, dt), q = clone(p);
      Tensor m = Tensor::empty(shape, dt), v = Tensor::empty(shape, dt);
      Tensor qm = zeros(shape, dt), qv = zeros(shape, dt);
      Tensor step = zeros(Shape{}, DType::int64);
      for (int t = 1; t <= 3; ++t) {
        Tensor g = from_data(random_values(rng, n, -1, 1), shape, dt);
        increment_(step);
        adam_update_(p, g, m, v, lr, step,
                     AdamUpdateOptions()
                         .betas(b1, b2)
                         .eps(eps)
                         .weight_decay(wd)
                         .decoupled(decoupled)
                         .fresh_state(t == 1));
        double lrv = lr.item<double>();
        Tensor step_size = full(Shape{}, lrv / (1 - std::pow(b1, t)), dt);
        Tensor sqrt_bc2 = full(Shape{}, std::sqrt(1 - std::pow(b2, t)), dt);
        Tensor gq = g;
        if (decoupled) q.mul_(rsub(1.0, mul(lr, wd)));
        else gq = add(g, mul(q, wd));
        qm.mul_(b1);
        qm.add_(gq, 1.0 - b1);
        qv.mul_(b2);
        qv.add_(mul(gq, gq), 1.0 - b2);
        q.sub_(div(mul(qm, step_size), add(div(sqrt(qv), sqrt_bc2), eps)));
      }
      EXPECT_EQ(p.to_vector<double>(), q.to_vector<double>()) << "adam decoupled " << decoupled;
      EXPECT_EQ(m.to_vector<double>(), qm.to_vector<double>());
      EXPECT_EQ(v.to_vector<double>(), qv.to_vector<double>());
    }
  }
}

TEST(Optim, IncrementCountsInt32AndInt64) {
  Tensor a = zeros(Shape{}, DType::int64), b = full(Shape{1}, 41.0, DType::int32);
  for (int i = 0; i < 5; ++i) increment_(a);
  increment_(b);
  EXPECT_EQ(a.item<int64_t>(), 5);
  EXPECT_EQ(b.item<int32_t>(), 42);
}

// lr and t are read from memory when the kernel runs: a value written after the update was
// queued, but before it ran, is the one used (a kernel argument fixed at enqueue would miss
// it, and so would a traced step replayed with a new lr).
TEST(Optim, LrAndStepAreReadWhenTheKernelRuns) {
  SynchronousGuard async(false);  // the gate must run on the worker, not inline
  for (bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "adam_update_" : "sgd_update_");
    Tensor p = from_data({1.0, -2.0}, Shape{2}, DType::float64);
    Tensor g = from_data({0.5, 0.25}, Shape{2}, DType::float64);
    Tensor m = Tensor::empty(Shape{2}, DType::float64), v = Tensor::empty(Shape{2}, DType::float64);
    Tensor none;
    Tensor lr = full(Shape{}, 0.1, DType::float64);
    Tensor step = full(Shape{}, 1.0, DType::int64);
    std::latch release(1);
    // Holds the worker, then writes lr = 0.5 and t = 10 from the worker: after the update
    // below was queued, before it runs (one in-order stream, so the undeclared write to
    // step is ordered too).
    debug::gate(lr, [&] {
      release.wait();
      *lr.data<double>() = 0.5;
      *step.data<int64_t>() = 10;
    });
    if (adam)
      adam_update_(p, g, m, v, lr, step,
                   AdamUpdateOptions().betas(0.5, 0.5).eps(0).fresh_state(true));
    else sgd_update_(p, g, none, lr, SgdUpdateOptions());
    release.count_down();
    std::vector<double> got = p.to_vector<double>();
    if (adam) {
      // t = 10, fresh state: m = 0.5 g, v = 0.5 g²; step = lr / (1 - 2^-10) * m /
      // (sqrt(v) / sqrt(1 - 2^-10)) = lr * sqrt(0.5) / sqrt(1 - 2^-10) * sign(g).
      double k = std::sqrt(1 - std::pow(0.5, 10));
      double step_len = 0.5 * 0.5 / (std::sqrt(0.5) / k) / (1 - std::pow(0.5, 10));
      EXPECT_NEAR(got[0], 1.0 - step_len, 1e-12);
      EXPECT_NEAR(got[1], -2.0 - step_len, 1e-12);
    } else {
      EXPECT_DOUBLE_EQ(got[0], 1.0 - 0.5 * 0.5);
      EXPECT_DOUBLE_EQ(got[1], -2.0 - 0.5 * 0.25);
    }
  }
}

TEST(Optim, StepBelowOneFailsTheUpdate) {
  Tensor p = ones({3}), g = ones({3}), m = zeros({3}), v = zeros({3});
  Tensor lr = full(Shape{}, 0.1), step = zeros(Shape{}, DType::int64);  // no increment_
  adam_update_(p, g, m, v, lr, step, AdamUpdateOptions());
  try {
    p.wait_to_read();
    ADD_FAILURE() << "no error for step 0";
  } catch (const Error& e) {
    test::expect_contains(e.what(), {"[adam_update_]", "step count 0", "increment_"},
                          "p.wait_to_read()");
  }
  EXPECT_THROW(m.wait_to_read(), Error);  // every written tensor carries the failure
  try {
    wait_all();
  } catch (const Error&) {
  }
}

// m and v are listed as writes only; a failure they carry must still reach the parameter.
TEST(Optim, FailedStateReachesTheParameter) {
  Tensor p = ones({3}), g = ones({3}), m = zeros({3}), v = zeros({3});
  Tensor lr = full(Shape{}, 0.1), step = full(Shape{}, 1.0, DType::int64);
  debug::fail(g, v, "v went bad");
  adam_update_(p, g, m, v, lr, step, AdamUpdateOptions());
  try {
    p.wait_to_read();
    ADD_FAILURE() << "the failure of v did not reach p";
  } catch (const Error& e) {
    test::expect_contains(e.what(), {"[adam_update_]", "v holds the failure", "v went bad"},
                          "p.wait_to_read()");
  }
  // A failed parameter (a read) skips the update and passes its failure on.
  Tensor q = ones({3}), mq = zeros({3}), vq = zeros({3});
  debug::fail(g, q, "q went bad");
  adam_update_(q, g, mq, vq, lr, step, AdamUpdateOptions());
  EXPECT_THROW(mq.wait_to_read(), Error);
  Tensor r = ones({3}), buf = zeros({3});
  debug::fail(g, buf, "buf went bad");
  sgd_update_(r, g, buf, lr, SgdUpdateOptions().momentum(0.9));
  EXPECT_THROW(r.wait_to_read(), Error);
  try {
    wait_all();
  } catch (const Error&) {
  }
}

// Every argument error throws at the call and queues nothing.
TEST(Optim, ArgumentErrorsThrowBeforeQueueing) {
  Tensor p = ones({2, 3}), g = ones({2, 3}), m = zeros({2, 3}), v = zeros({2, 3});
  Tensor buf = zeros({2, 3}), none;
  Tensor lr = full(Shape{}, 0.1), step = full(Shape{}, 1.0, DType::int64);
  Tensor g_bad = ones({3, 2}), m64 = zeros({2, 3}, DType::float64), v_bad = zeros({6});
  Tensor lr64 = full(Shape{}, 0.1, DType::float64), lr2 = full(Shape{2}, 0.1);
  Tensor step_f = full(Shape{}, 1.0), pi = zeros({2, 3}, DType::int32);
  Tensor buf_bad = zeros({2, 4}), state = zeros({4, 3});
  Tensor leaf = ones({2, 3}).requires_grad_();
  Tensor counter = zeros(Shape{}, DType::float32);
  wait_all();
  uint64_t before = Engine::get().stats().queued;
  AdamUpdateOptions ao;
  SgdUpdateOptions mo = SgdUpdateOptions().momentum(0.9);

  // Shapes, dtypes.
  EXPECT_TIDE_ERROR(adam_update_(p, g_bad, m, v, lr, step, ao), "[adam_update_]", "grad (3, 2)",
                    "param (2, 3)", "expected the parameter's shape");
  EXPECT_TIDE_ERROR(adam_update_(p, g, m64, v, lr, step, ao), "[adam_update_]", "m (2, 3) float64",
                    "param (2, 3) float32");
  EXPECT_TIDE_ERROR(adam_update_(p, g, m, v_bad, lr, step, ao), "[adam_update_]", "v (6,)");
  EXPECT_TIDE_ERROR(adam_update_(p, g, m, v, lr64, step, ao), "[adam_update_]",
                    "lr must be a one-element float32", "() float64");
  EXPECT_TIDE_ERROR(sgd_update_(p, g, none, lr2, SgdUpdateOptions()), "[sgd_update_]",
                    "lr must be a one-element", "(2,) float32");
  EXPECT_TIDE_ERROR(adam_update_(p, g, m, v, lr, step_f, ao), "[adam_update_]",
                    "step must be a one-element int64", "() float32");
  EXPECT_TIDE_ERROR(sgd_update_(pi, g, none, lr, SgdUpdateOptions()), "[sgd_update_]",
                    "param must be float32 or float64", "int32");
  EXPECT_TIDE_ERROR(sgd_update_(p, g, none, lr, mo), "[sgd_update_]",
                    "momentum_buf is an undefined tensor");
  EXPECT_TIDE_ERROR(sgd_update_(p, none, buf, lr, mo), "[sgd_update_]",
                    "grad is an undefined tensor");
  EXPECT_TIDE_ERROR(sgd_update_(p, g, buf_bad, lr, mo), "[sgd_update_]", "momentum_buf (2, 4)",
                    "param (2, 3)");

  // Options.
  EXPECT_TIDE_ERROR(adam_update_(p, g, m, v, lr, step, AdamUpdateOptions().betas(1.0, 0.9)),
                    "[adam_update_]", "invalid betas (1, 0.9)");
  EXPECT_TIDE_ERROR(adam_update_(p, g, m, v, lr, step, AdamUpdateOptions().eps(-1)),
                    "[adam_update_]", "invalid eps -1");
  EXPECT_TIDE_ERROR(sgd_update_(p, g, buf, lr, SgdUpdateOptions().momentum(-0.5)), "[sgd_update_]",
                    "momentum -0.5");
  EXPECT_TIDE_ERROR(sgd_update_(p, g, buf, lr, SgdUpdateOptions().nesterov(true)), "[sgd_update_]",
                    "Nesterov");

  // Overlap: a written tensor sharing memory with another operand.
  EXPECT_TIDE_ERROR(adam_update_(p, g, m, m, lr, step, ao), "[adam_update_]",
                    "m (2, 3) float32 is written in place but shares memory with v");
  EXPECT_TIDE_ERROR(sgd_update_(p, p, none, lr, SgdUpdateOptions()), "[sgd_update_]",
                    "param (2, 3) float32 is written in place but shares memory with grad");
  Tensor ms = state.slice(0, 2), vs = state.slice(1, 3);  // rows 0-1 and 1-2: overlap
  EXPECT_TIDE_ERROR(adam_update_(p, g, ms, vs, lr, step, ao), "[adam_update_]", "shares memory");
  Tensor lr_in_buf = buf.reshape({6}).slice(0, 1).reshape({});
  EXPECT_TIDE_ERROR(sgd_update_(p, g, buf, lr_in_buf, mo), "[sgd_update_]", "momentum_buf",
                    "shares memory with lr");

  // In place on a tensor that requires grad, while recording.
  EXPECT_TIDE_ERROR(sgd_update_(leaf, g, none, lr, SgdUpdateOptions()), "[sgd_update_]",
                    "requires grad", "NoGrad");
  EXPECT_TIDE_ERROR(increment_(counter), "[increment_]", "one-element int32 or int64", "float32");

  EXPECT_EQ(Engine::get().stats().queued, before) << "an error path queued work";

  // Disjoint slices of one storage are fine (m and v packed together).
  Tensor mv = zeros({4, 3});
  Tensor p2 = ones({2, 3});
  Tensor mslice = mv.slice(0, 2), vslice = mv.slice(2, 4);
  adam_update_(p2, g, mslice, vslice, lr, step, ao);
  {
    NoGrad ng;
    sgd_update_(leaf, g, none, lr, SgdUpdateOptions());  // allowed under NoGrad
  }
  for (float x : p2.to_vector<float>()) EXPECT_NEAR(x, 1.0f - 0.1f, 1e-6);
  for (float x : leaf.to_vector<float>()) EXPECT_NEAR(x, 0.9f, 1e-6);
}

// ---- grad scale (gradient clipping fused into the update) ------------------------------------

// An update given grad_scale s equals the update of grad * s (rounded to T, as
// grad.mul_(s) would leave it) bit for bit, s changing between steps, on every device.
TEST(Optim, GradScaleEqualsScalingTheGradientFirstBitwise) {
  std::mt19937 rng(5);
  const double kScales[] = {0.25, 1.0, 0.7};
  std::vector<Device> devices{Device::cpu()};
  for (Device d : test::case_devices()) devices.push_back(d);
  for (Device d : devices)
    for (DType dt : {DType::float32, DType::float64}) {
      SCOPED_TRACE(d.str() + " " + std::string(name(dt)));
      Shape shape{3, detail::kParallelGrain / 2 + 7};
      int64_t n = shape.numel();
      auto make = [&](double lo, double hi) {
        return from_data(random_values(rng, n, lo, hi), shape, dt).to(d);
      };
      Tensor lr = full(Shape{}, 0.05, dt, d), scale = full(Shape{}, kScales[0], dt, d);
      // SGD without and with momentum (Nesterov, weight decay).
      for (double mom : {0.0, 0.9}) {
        Tensor p = make(-2, 2), q = clone(p);
        Tensor buf = Tensor::empty(shape, dt, d), qbuf = Tensor::empty(shape, dt, d);
        SgdUpdateOptions o = SgdUpdateOptions().momentum(mom).nesterov(mom > 0).weight_decay(0.01);
        for (int s = 0; s < 3; ++s) {
          if (s > 0) scale.copy_(full(Shape{}, kScales[s], dt, d));
          Tensor g = make(-1, 1);
          sgd_update_(p, g, buf, lr, scale, SgdUpdateOptions(o).fresh_state(s == 0));
          sgd_update_(q, mul(g, scale), qbuf, lr, SgdUpdateOptions(o).fresh_state(s == 0));
        }
        EXPECT_EQ(p.to_vector<double>(), q.to_vector<double>()) << "sgd momentum " << mom;
      }
      // Adam and AdamW with weight decay.
      for (bool decoupled : {false, true}) {
        Tensor p = make(-2, 2), q = clone(p);
        Tensor m = Tensor::empty(shape, dt, d), v = Tensor::empty(shape, dt, d);
        Tensor qm = Tensor::empty(shape, dt, d), qv = Tensor::empty(shape, dt, d);
        Tensor step = zeros(Shape{}, DType::int64, d);
        AdamUpdateOptions o = AdamUpdateOptions().weight_decay(0.1).decoupled(decoupled);
        for (int s = 0; s < 3; ++s) {
          scale.copy_(full(Shape{}, kScales[s], dt, d));
          Tensor g = make(-1, 1);
          increment_(step);
          adam_update_(p, g, m, v, lr, step, scale, AdamUpdateOptions(o).fresh_state(s == 0));
          adam_update_(q, mul(g, scale), qm, qv, lr, step,
                       AdamUpdateOptions(o).fresh_state(s == 0));
        }
        EXPECT_EQ(p.to_vector<double>(), q.to_vector<double>()) << "adam decoupled " << decoupled;
        EXPECT_EQ(v.to_vector<double>(), qv.to_vector<double>());
      }
    }
}

// The scale is read when the kernel runs, like lr: a value written after the update was
// queued, before it ran, is the one applied.
TEST(Optim, GradScaleIsReadWhenTheKernelRuns) {
  SynchronousGuard async(false);  // the gate must run on the worker, not inline
  for (bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "adam_update_" : "sgd_update_");
    Tensor p = from_data({1.0, -2.0}, Shape{2}, DType::float64);
    Tensor g = from_data({0.5, 0.25}, Shape{2}, DType::float64);
    Tensor m = Tensor::empty(Shape{2}, DType::float64), v = Tensor::empty(Shape{2}, DType::float64);
    Tensor none, lr = full(Shape{}, 0.1, DType::float64);
    Tensor step = full(Shape{}, 1.0, DType::int64), scale = full(Shape{}, 1.0, DType::float64);
    std::latch release(1);
    debug::gate(scale, [&] {
      release.wait();
      *scale.data<double>() = 0.5;
    });
    if (adam)
      adam_update_(p, g, m, v, lr, step, scale,
                   AdamUpdateOptions().betas(0.5, 0.5).weight_decay(0.1).fresh_state(true));
    else sgd_update_(p, g, none, lr, scale, SgdUpdateOptions().weight_decay(0.2));
    release.count_down();
    std::vector<double> got = p.to_vector<double>();
    if (adam) {
      // t = 1, fresh state: the step is lr * sign(0.5 g + 0.1 p) up to eps (1e-8): 0.35 > 0,
      // and -0.075 < 0 where the scale 1 would have given 0.05 > 0.
      EXPECT_NEAR(got[0], 1.0 - 0.1, 1e-7);
      EXPECT_NEAR(got[1], -2.0 + 0.1, 1e-7);
    } else {
      EXPECT_DOUBLE_EQ(got[0], 1.0 - 0.1 * (0.5 * 0.5 + 0.2 * 1.0));
      EXPECT_DOUBLE_EQ(got[1], -2.0 - 0.1 * (0.5 * 0.25 + 0.2 * -2.0));
    }
  }
}

// ---- warmup_cosine_lr_ ------------------------------------------------------------------------

// nanoGPT's get_lr as its train.py writes it (it > decay_iters: min_lr; no guard for
// warmup == decay_iters, which divides 0 by 0 there).
double nanogpt_lr(int64_t it, double lr, double min_lr, int64_t warmup, int64_t decay) {
  if (it < warmup) return lr * double(it + 1) / double(warmup + 1);
  if (it > decay) return min_lr;
  double ratio = double(it - warmup) / double(decay - warmup);
  double coeff = 0.5 * (1.0 + std::cos(3.141592653589793 * ratio));
  return min_lr + coeff * (lr - min_lr);
}

TIDE_OP_TEST(Optim, WarmupCosineLrIsNanoGptsGetLr, {OpId::warmup_cosine_lr_, Check::value}) {
  const WarmupCosineOptions cfgs[] = {
      WarmupCosineOptions{6e-4, 6e-5, 10, 40}, WarmupCosineOptions{0.1, 0.0, 0, 20},
      WarmupCosineOptions{1.0, 1.0, 3, 9}, WarmupCosineOptions{0.5, 0.05, 5, 5}};
  std::vector<Device> devices{Device::cpu()};
  for (Device d : test::case_devices()) devices.push_back(d);
  for (Device d : devices)
    for (DType dt : {DType::float32, DType::float64})
      for (const WarmupCosineOptions& c : cfgs) {
        SCOPED_TRACE(d.str() + " " + std::string(name(dt)) + " lr " + std::to_string(c.lr_) +
                     " min_lr " + std::to_string(c.min_lr_) + " warmup " +
                     std::to_string(c.warmup_) + " decay_steps " + std::to_string(c.decay_steps_));
        Tensor lr = full(Shape{}, 123.0, dt, d), step = full(Shape{}, -2.0, DType::int64, d);
        for (int64_t it = -2; it <= c.decay_steps_ + 5; ++it) {
          warmup_cosine_lr_(lr, step, c);
          increment_(step);
          // A negative step counts as 0; warmup == decay_steps: min_lr from the warmup's end.
          const int64_t at = std::max<int64_t>(it, 0);
          const double want = c.warmup_ == c.decay_steps_ && at >= c.warmup_
                                  ? c.min_lr_
                                  : nanogpt_lr(at, c.lr_, c.min_lr_, c.warmup_, c.decay_steps_);
          if (dt == DType::float32) EXPECT_FLOAT_EQ(lr.item<float>(), float(want)) << "it " << it;
          else EXPECT_NEAR(lr.item<double>(), want, 1e-15 * want) << "it " << it;
        }
      }
}

// Every argument error of the grad scale and the schedule throws at the call and queues
// nothing.
TEST(Optim, GradScaleAndScheduleErrorsThrowBeforeQueueing) {
  Tensor p = ones({2, 3}), g = ones({2, 3}), m = zeros({2, 3}), v = zeros({2, 3}), none;
  Tensor lr = full(Shape{}, 0.1), step = full(Shape{}, 1.0, DType::int64);
  Tensor scale64 = full(Shape{}, 0.5, DType::float64), scale2 = full(Shape{2}, 0.5);
  Tensor lr_int = zeros(Shape{}, DType::int32), lr2 = zeros(Shape{2});
  Tensor step_f = full(Shape{}, 1.0), step2 = zeros(Shape{2}, DType::int64);
  Tensor leaf_lr = full(Shape{}, 0.1).requires_grad_();
  WarmupCosineOptions ok{0.1, 0.01, 2, 10};
  wait_all();
  uint64_t before = Engine::get().stats().queued;

  EXPECT_TIDE_ERROR(adam_update_(p, g, m, v, lr, step, scale64, AdamUpdateOptions()),
                    "[adam_update_]", "grad_scale must be a one-element float32", "() float64");
  EXPECT_TIDE_ERROR(sgd_update_(p, g, none, lr, scale2, SgdUpdateOptions()), "[sgd_update_]",
                    "grad_scale must be a one-element float32", "(2,) float32");
  Tensor scale_in_p = p.reshape({6}).slice(0, 1).reshape({});
  EXPECT_TIDE_ERROR(sgd_update_(p, g, none, lr, scale_in_p, SgdUpdateOptions()), "[sgd_update_]",
                    "param (2, 3) float32 is written in place but shares memory with grad_scale");
  Tensor scale_in_m = m.reshape({6}).slice(2, 3).reshape({});
  EXPECT_TIDE_ERROR(adam_update_(p, g, m, v, lr, step, scale_in_m, AdamUpdateOptions()),
                    "[adam_update_]", "m (2, 3) float32", "shares memory with grad_scale");

  EXPECT_TIDE_ERROR(warmup_cosine_lr_(lr_int, step, ok), "[warmup_cosine_lr_]",
                    "lr must be a one-element float32 or float64 tensor", "int32");
  EXPECT_TIDE_ERROR(warmup_cosine_lr_(lr2, step, ok), "[warmup_cosine_lr_]", "(2,) float32");
  EXPECT_TIDE_ERROR(warmup_cosine_lr_(lr, step_f, ok), "[warmup_cosine_lr_]",
                    "step must be a one-element int64", "() float32");
  EXPECT_TIDE_ERROR(warmup_cosine_lr_(lr, step2, ok), "[warmup_cosine_lr_]", "step", "(2,) int64");
  EXPECT_TIDE_ERROR(warmup_cosine_lr_(leaf_lr, step, ok), "[warmup_cosine_lr_]", "requires grad");
  EXPECT_TIDE_ERROR(warmup_cosine_lr_(lr, step, WarmupCosineOptions{0.1, 0.2, 2, 10}),
                    "[warmup_cosine_lr_]", "invalid lr 0.1 and min_lr 0.2", "0 <= min_lr <= lr");
  EXPECT_TIDE_ERROR(warmup_cosine_lr_(lr, step, WarmupCosineOptions{0.1, -1, 2, 10}),
                    "[warmup_cosine_lr_]", "min_lr -1");
  EXPECT_TIDE_ERROR(warmup_cosine_lr_(lr, step, WarmupCosineOptions{0.1, 0.01, 5, 4}),
                    "[warmup_cosine_lr_]", "invalid warmup 5 and decay_steps 4",
                    "0 <= warmup <= decay_steps");
  EXPECT_TIDE_ERROR(warmup_cosine_lr_(lr, step, WarmupCosineOptions{0.1, 0.01, -1, 4}),
                    "[warmup_cosine_lr_]", "invalid warmup -1");
  EXPECT_EQ(Engine::get().stats().queued, before) << "an error path queued work";
}

TEST(Optim, TableRows) {
  for (OpId id :
       {OpId::sgd_update_, OpId::adam_update_, OpId::increment_, OpId::warmup_cosine_lr_}) {
    const OpTraits& t = op_traits(id);
    EXPECT_EQ(t.kind, OpKind::optimizer) << t.name;
    EXPECT_TRUE(t.in_place) << t.name;
    EXPECT_FALSE(t.differentiable) << t.name;
    EXPECT_TRUE(op_supported(Device::cpu(), id)) << t.name;
    for (Device d : test::case_devices())  // the fake GPU here, cuda:0 in tide_cuda_tests
      EXPECT_TRUE(op_supported(d, id)) << t.name << " on " << d.str();
  }
}

}  // namespace
}  // namespace tide
