// Elementwise ops through the harness: binary ops with broadcasting, tensor-scalar forms and
// operators, unary math, in-place updates, integer dtypes and comparison masks; then the
// argument errors. Gradients by central differences for the differentiable ones.
// Not here: views and creation (test_creation.cpp), reductions (test_reduce.cpp).
#include <cmath>
#include <limits>

#include "tests/ops/op_harness.h"

namespace tide {
namespace {

using test::Check;
using test::OpCase;
using test::ref_binary;
using test::ref_unary;
using V = std::vector<Tensor>;

DType mask_dtype(DType t) { return is_floating(t) ? t : DType::float32; }
const std::vector<DType> kInts{DType::int32, DType::int64};

OpCase binary(OpId op, test::BuildFn build, std::function<double(double, double)> f) {
  return OpCase{
      .op = op, .build = build, .ref = ref_binary(f), .shapes = test::binary_shapes, .grad = true};
}
OpCase unary(OpId op, test::BuildFn build, std::function<double(double)> f, test::GenFn gen) {
  return OpCase{.op = op, .build = build, .ref = ref_unary(f), .gen = gen, .grad = true};
}
double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// GELU's definitions (PyTorch's approximate='none' | 'tanh') and their derivatives, in double.
constexpr double kGeluBeta = 0.79788456080286535588;  // sqrt(2 / pi)
double gelu_def(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_def(double x) {
  return 0.5 * x * (1 + std::tanh(kGeluBeta * (x + 0.044715 * x * x * x)));
}
// The same through identities that keep negative inputs' small results (erfc(-y) = 1 + erf(y),
// 2 / (1 + exp(-2z)) = 1 + tanh(z)), for inputs far out.
double gelu_far(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh_far(double x) {
  return x / (1 + std::exp(-2 * kGeluBeta * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}
double gelu_tanh_grad_ref(double x) {
  const double t = std::tanh(kGeluBeta * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kGeluBeta * (1 + 3 * 0.044715 * x * x);
}

// ---- binary, tensor-tensor ------------------------------------------------------------------

TIDE_OP_CASES(Elementwise, Add) {
  return {binary(
              OpId::add, [](const V& x) { return add(x[0], x[1]); },
              [](double a, double b) { return a + b; }),
          binary(
              OpId::add, [](const V& x) { return x[0] + x[1]; },
              [](double a, double b) { return a + b; })};
}

TIDE_OP_CASES(Elementwise, ReluGrad) {
  OpCase c = binary(
      OpId::relu_grad, [](const V& x) { return relu_grad(x[0], x[1]); },
      [](double g, double a) { return a > 0 ? g : 0.0; });
  c.grad = false;  // a backward op itself
  return {c};
}

TIDE_OP_CASES(Elementwise, GeluGrad) {
  OpCase e = binary(
      OpId::gelu_grad, [](const V& x) { return gelu_grad(x[0], x[1]); },
      [](double g, double a) { return g * gelu_grad_ref(a); });
  e.gen = test::gen_uniform(-4, 4);
  e.grad = false;  // a backward op itself
  OpCase t = e;
  t.op = OpId::gelu_tanh_grad;
  t.build = [](const V& x) { return gelu_grad(x[0], x[1], GeluApprox::tanh); };
  t.ref = ref_binary([](double g, double a) { return g * gelu_tanh_grad_ref(a); });
  return {e, t};
}

TIDE_OP_CASES(Elementwise, Sub) {
  return {binary(
              OpId::sub, [](const V& x) { return sub(x[0], x[1]); },
              [](double a, double b) { return a - b; }),
          binary(
              OpId::sub, [](const V& x) { return x[0] - x[1]; },
              [](double a, double b) { return a - b; })};
}

TIDE_OP_CASES(Elementwise, Mul) {
  return {binary(
              OpId::mul, [](const V& x) { return mul(x[0], x[1]); },
              [](double a, double b) { return a * b; }),
          binary(
              OpId::mul, [](const V& x) { return x[0] * x[1]; },
              [](double a, double b) { return a * b; })};
}

TIDE_OP_CASES(Elementwise, Div) {
  OpCase c = binary(
      OpId::div, [](const V& x) { return div(x[0], x[1]); },
      [](double a, double b) { return a / b; });
  c.gen = test::gen_each({test::gen_uniform(-2, 2), test::gen_away_from_zero(0.5, 2)});
  OpCase op = c;
  op.build = [](const V& x) { return x[0] / x[1]; };
  return {c, op};
}

TIDE_OP_CASES(Elementwise, Maximum) {
  OpCase c = binary(
      OpId::maximum, [](const V& x) { return maximum(x[0], x[1]); },
      [](double a, double b) { return std::max(a, b); });
  c.gen = test::gen_lattice();  // the two sides never tie: no kink inside the step
  return {c};
}

OpCase compare(OpId op, test::BuildFn build, std::function<double(double, double)> f) {
  OpCase c = binary(op, build, f);
  c.gen = test::gen_ints(-2, 2);  // many ties
  c.grad = false;
  c.dtypes = {DType::float32, DType::float64, DType::int32, DType::int64};
  c.out_dtype = mask_dtype;
  return c;
}

TIDE_OP_CASES(Elementwise, Comparisons) {
  return {compare(
              OpId::eq, [](const V& x) { return eq(x[0], x[1]); },
              [](double a, double b) { return double(a == b); }),
          compare(
              OpId::gt, [](const V& x) { return gt(x[0], x[1]); },
              [](double a, double b) { return double(a > b); }),
          compare(
              OpId::lt, [](const V& x) { return lt(x[0], x[1]); },
              [](double a, double b) { return double(a < b); })};
}

TIDE_OP_CASES(Elementwise, IntegerArithmetic) {
  auto ints = [](OpId op, test::BuildFn b, std::function<double(double, double)> f) {
    OpCase c = binary(op, b, f);
    c.gen = test::gen_ints(-50, 50);
    c.dtypes = kInts;
    c.grad = false;
    return c;
  };
  return {ints(
              OpId::add, [](const V& x) { return add(x[0], x[1]); },
              [](double a, double b) { return a + b; }),
          ints(
              OpId::sub, [](const V& x) { return sub(x[0], x[1]); },
              [](double a, double b) { return a - b; }),
          ints(
              OpId::mul, [](const V& x) { return mul(x[0], x[1]); },
              [](double a, double b) { return a * b; }),
          ints(
              OpId::maximum, [](const V& x) { return maximum(x[0], x[1]); },
              [](double a, double b) { return std::max(a, b); })};
}

TIDE_OP_CASES(Elementwise, IntegerUnary) {
  OpCase n{.op = OpId::neg,
           .build = [](const V& x) { return neg(x[0]); },
           .ref = ref_unary([](double a) { return -a; }),
           .gen = test::gen_ints(-9, 9),
           .dtypes = kInts};
  OpCase a = n;
  a.op = OpId::abs;
  a.build = [](const V& x) { return abs(x[0]); };
  a.ref = ref_unary([](double v) { return std::abs(v); });
  return {n, a};
}

// ---- tensor-scalar and operators ------------------------------------------------------------

TIDE_OP_CASES(Elementwise, ScalarForms) {
  auto sc = [](OpId op, test::BuildFn b, std::function<double(double)> f) {
    return unary(op, b, f, test::gen_uniform(-2, 2));
  };
  auto away = test::gen_away_from_zero(0.5, 2);
  OpCase rdiv_c = sc(
      OpId::div, [](const V& x) { return rdiv(3.0, x[0]); }, [](double a) { return 3.0 / a; });
  rdiv_c.gen = away;
  OpCase rdiv_op = sc(
      OpId::div, [](const V& x) { return 3.0 / x[0]; }, [](double a) { return 3.0 / a; });
  rdiv_op.gen = away;
  OpCase max_c = sc(
      OpId::maximum, [](const V& x) { return maximum(x[0], 0.3); },
      [](double a) { return std::max(a, 0.3); });
  max_c.gen = test::gen_lattice();  // never within 0.05 of 0.3
  return {
      sc(
          OpId::add, [](const V& x) { return add(x[0], 1.5); }, [](double a) { return a + 1.5; }),
      sc(
          OpId::add, [](const V& x) { return x[0] + 1.0; }, [](double a) { return a + 1.0; }),
      sc(
          OpId::add, [](const V& x) { return 1.0 + x[0]; }, [](double a) { return 1.0 + a; }),
      sc(
          OpId::sub, [](const V& x) { return sub(x[0], 0.75); }, [](double a) { return a - 0.75; }),
      sc(
          OpId::sub, [](const V& x) { return x[0] - 0.75; }, [](double a) { return a - 0.75; }),
      sc(
          OpId::sub, [](const V& x) { return rsub(2.5, x[0]); }, [](double a) { return 2.5 - a; }),
      sc(
          OpId::sub, [](const V& x) { return 2.0 - x[0]; }, [](double a) { return 2.0 - a; }),
      sc(
          OpId::mul, [](const V& x) { return mul(x[0], -1.5); }, [](double a) { return -1.5 * a; }),
      sc(
          OpId::mul, [](const V& x) { return 2.0 * x[0]; }, [](double a) { return 2.0 * a; }),
      sc(
          OpId::mul, [](const V& x) { return x[0] * 0.5; }, [](double a) { return 0.5 * a; }),
      sc(
          OpId::div, [](const V& x) { return div(x[0], 4.0); }, [](double a) { return a / 4.0; }),
      sc(
          OpId::div, [](const V& x) { return x[0] / 3.0; }, [](double a) { return a / 3.0; }),
      sc(
          OpId::neg, [](const V& x) { return -x[0]; }, [](double a) { return -a; }),
      rdiv_c,
      rdiv_op,
      max_c};
}

TIDE_OP_CASES(Elementwise, ScalarComparisons) {
  auto sc = [](OpId op, test::BuildFn b, std::function<double(double)> f) {
    OpCase c = unary(op, b, f, test::gen_ints(-2, 2));
    c.grad = false;
    c.dtypes = {DType::float32, DType::float64, DType::int32, DType::int64};
    c.out_dtype = mask_dtype;
    return c;
  };
  return {sc(
              OpId::eq, [](const V& x) { return eq(x[0], 1.0); },
              [](double a) { return double(a == 1.0); }),
          sc(
              OpId::gt, [](const V& x) { return gt(x[0], 0.0); },
              [](double a) { return double(a > 0.0); }),
          sc(
              OpId::lt, [](const V& x) { return lt(x[0], -1.0); },
              [](double a) { return double(a < -1.0); })};
}

// ---- unary math -----------------------------------------------------------------------------

TIDE_OP_CASES(Elementwise, UnaryMath) {
  using test::gen_away_from_zero;
  using test::gen_uniform;
  return {
      unary(
          OpId::neg, [](const V& x) { return neg(x[0]); }, [](double a) { return -a; },
          gen_uniform(-2, 2)),
      unary(
          OpId::exp, [](const V& x) { return exp(x[0]); }, [](double a) { return std::exp(a); },
          gen_uniform(-3, 3)),
      unary(
          OpId::log, [](const V& x) { return log(x[0]); }, [](double a) { return std::log(a); },
          gen_uniform(0.2, 3)),
      unary(
          OpId::sqrt, [](const V& x) { return sqrt(x[0]); }, [](double a) { return std::sqrt(a); },
          gen_uniform(0.2, 3)),
      unary(
          OpId::abs, [](const V& x) { return abs(x[0]); }, [](double a) { return std::abs(a); },
          gen_away_from_zero(0.1, 2)),
      unary(
          OpId::relu, [](const V& x) { return relu(x[0]); },
          [](double a) { return a > 0 ? a : 0.0; }, gen_away_from_zero(0.1, 2)),
      unary(
          OpId::sigmoid, [](const V& x) { return sigmoid(x[0]); }, sigmoid_ref, gen_uniform(-6, 6)),
      unary(
          OpId::tanh, [](const V& x) { return tanh(x[0]); }, [](double a) { return std::tanh(a); },
          gen_uniform(-3, 3)),
      unary(
          OpId::gelu, [](const V& x) { return gelu(x[0]); }, gelu_def, gen_uniform(-5, 5)),
      unary(
          OpId::gelu_tanh, [](const V& x) { return gelu(x[0], GeluApprox::tanh); }, gelu_tanh_def,
          gen_uniform(-5, 5)),
  };
}

TIDE_OP_CASES(Elementwise, Pow) {
  using test::gen_away_from_zero;
  auto p = [](double e, test::GenFn gen) {
    return unary(
        OpId::pow, [e](const V& x) { return pow(x[0], e); },
        [e](double a) { return std::pow(a, e); }, gen);
  };
  return {p(2.0, test::gen_uniform(-2, 2)),    p(3.0, test::gen_uniform(-2, 2)),
          p(1.0, test::gen_uniform(-2, 2)),    p(0.5, test::gen_uniform(0.2, 3)),
          p(-1.0, gen_away_from_zero(0.5, 2)), p(-2.5, test::gen_uniform(0.5, 2))};
}

// ---- in place -------------------------------------------------------------------------------

OpCase into(OpId op, std::function<void(Tensor&, const Tensor&)> apply,
            std::function<double(double, double)> f) {
  return OpCase{.op = op,
                .build =
                    [apply](const V& x) {
                      Tensor y = clone(x[0]);  // the inputs stay unchanged for the harness
                      apply(y, x[1]);
                      return y;
                    },
                .ref = ref_binary(f),
                .shapes = test::into_shapes};
}

TIDE_OP_CASES(Elementwise, InPlace) {
  std::vector<OpCase> v{
      into(
          OpId::add_, [](Tensor& y, const Tensor& o) { y.add_(o); },
          [](double a, double b) { return a + b; }),
      into(
          OpId::add_, [](Tensor& y, const Tensor& o) { y.add_(o, -0.25); },
          [](double a, double b) { return a - 0.25 * b; }),
      into(
          OpId::sub_, [](Tensor& y, const Tensor& o) { y.sub_(o); },
          [](double a, double b) { return a - b; }),
      into(
          OpId::sub_, [](Tensor& y, const Tensor& o) { y.sub_(o, 0.5); },
          [](double a, double b) { return a - 0.5 * b; }),
      into(
          OpId::mul_, [](Tensor& y, const Tensor& o) { y.mul_(o); },
          [](double a, double b) { return a * b; }),
      into(
          OpId::mul_, [](Tensor& y, const Tensor&) { y.mul_(-3.0); },
          [](double a, double) { return -3.0 * a; }),
      into(
          OpId::copy_, [](Tensor& y, const Tensor& o) { y.copy_(o); },
          [](double, double b) { return b; }),
  };
  // Integer tensors too (alpha 1 and an integral alpha are exact).
  OpCase i1 = into(
      OpId::add_, [](Tensor& y, const Tensor& o) { y.add_(o, 2.0); },
      [](double a, double b) { return a + 2 * b; });
  i1.dtypes = kInts;
  i1.gen = test::gen_ints(-20, 20);
  OpCase i2 = i1;
  i2.op = OpId::copy_;
  i2.build = [](const V& x) {
    Tensor y = clone(x[0]);
    y.copy_(x[1]);
    return y;
  };
  i2.ref = ref_binary([](double, double b) { return b; });
  v.push_back(i1);
  v.push_back(i2);
  return v;
}

TEST(Elementwise, InPlaceWaitsForEarlierReaders) {
  // b reads a before a is updated: b must see the old values (write-after-read hazard).
  Tensor a = full({300, 300}, 2.0);
  Tensor b = a * 3.0;
  a.add_(full({300}, 5.0));
  Tensor c = a * 1.0;
  a.mul_(0.0);
  std::vector<float> vb = b.to_vector<float>(), vc = c.to_vector<float>();
  EXPECT_EQ(vb.front(), 6.0f);
  EXPECT_EQ(vb.back(), 6.0f);
  EXPECT_EQ(vc.back(), 7.0f);
  EXPECT_EQ(a.to_vector<float>().back(), 0.0f);
}

// x += x[0] with x[0] a view of x's own first row: either the result is as if the operand
// were read before any write (NumPy), or the call is refused with "[add_]". Silently reading
// rows already updated is wrong.
TEST(Elementwise, InPlaceWithAnOverlappingOperand) {
  for (int64_t rows : {2, 200}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    Tensor x = arange(0.0, double(rows * 256), 1.0, DType::float64).reshape({rows, 256});
    std::vector<double> before = x.to_vector<double>(), want = before;
    for (size_t i = 0; i < want.size(); ++i) want[i] += before[i % 256];
    try {
      x.add_(x[0]);
      std::vector<double> got = x.to_vector<double>();
      // Row 1 shows it first: 256 + j + j, not 256 + j + 2j.
      EXPECT_EQ(std::vector<double>(got.begin() + 256, got.begin() + 260),
                std::vector<double>(want.begin() + 256, want.begin() + 260));
      EXPECT_TRUE(got == want);
    } catch (const Error& e) {
      test::expect_contains(e.what(), {"[add_]"}, "x.add_(x[0])");
    }
  }
}

TEST(Elementwise, InPlaceOnALeafAllowedUnderNoGrad) {
  Tensor w = ones({2, 3}).requires_grad_();
  {
    NoGrad ng;
    w.sub_(full({3}, 0.5), 2.0);  // as optimizers do
  }
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
}

// ---- numerical edge cases -------------------------------------------------------------------

TEST(Elementwise, SigmoidAndTanhStableForLargeInputs) {
  std::vector<double> xs{-1000, -100, -40, -1e-3, 0, 1e-3, 40, 100, 1000};
  for (DType dt : {DType::float32, DType::float64}) {
    SCOPED_TRACE(std::string(name(dt)));
    Tensor x = from_data(xs, Shape{int64_t(xs.size())}, dt);
    std::vector<double> s = sigmoid(x).to_vector<double>();
    std::vector<double> t = tanh(x).to_vector<double>();
    for (size_t i = 0; i < xs.size(); ++i) {
      ASSERT_TRUE(std::isfinite(s[i])) << "sigmoid(" << xs[i] << ")";
      EXPECT_GE(s[i], 0.0);
      EXPECT_LE(s[i], 1.0);
      EXPECT_NEAR(s[i], sigmoid_ref(xs[i]), 1e-7) << xs[i];
      if (xs[i] < -30) {
        EXPECT_LT(s[i], 1e-13);  // not rounded up to a larger value
      }
      EXPECT_NEAR(t[i], std::tanh(xs[i]), 1e-7) << xs[i];
    }
    // Gradients stay finite (0) far out.
    Tensor xg = from_data(xs, Shape{int64_t(xs.size())}, DType::float64).requires_grad_();
    sum(sigmoid(xg)).backward();
    for (double g : xg.grad().to_vector<double>()) EXPECT_TRUE(std::isfinite(g));
  }
}

// GELU and its gradient against its definitions evaluated with 80 digits, rounded to double
// (PyTorch gives the same to an ulp: gelu(1.0) = 0.8413447460685429, with approximate='tanh'
// 0.8411919906082768), on the CPU and every device of the suite.
TEST(Elementwise, GeluKnownValues) {
  struct Known {
    double x, gelu, gelu_tanh, grad, tanh_grad;
  };
  const std::vector<Known> known{
      {1.0, 0.8413447460685429, 0.8411919906082767, 1.0833154705876864, 1.0829640838457826},
      {-0.5, -0.15426876936299344, -0.15428599017485609, 0.13250487534383715, 0.1326300964653577},
      {2.0, 1.9544997361036416, 1.954597694087775, 1.085231801078197, 1.0860992566236183},
      {-3.0, -0.0040496940948902835, -0.003637392081773019, -0.011945647204183927,
       -0.011584166630969726},
      {0.0, 0.0, 0.0, 0.5, 0.5}};
  std::vector<double> xs;
  for (const Known& k : known) xs.push_back(k.x);
  std::vector<Device> devices = test::case_devices();
  devices.insert(devices.begin(), Device::cpu());
  for (Device d : devices)
    for (DType t : {DType::float32, DType::float64}) {
      SCOPED_TRACE(d.str() + " " + std::string(name(t)));
      // exp and erfc of a rounded argument: a few ulps, more where the argument is large.
      const double rtol = t == DType::float32 ? 2e-6 : 2e-14;
      Tensor x = from_data(xs, Shape{int64_t(xs.size())}, t, d);
      Tensor g = ones({int64_t(xs.size())}, t, d);
      std::vector<double> e = gelu(x).to_vector<double>();
      std::vector<double> h = gelu(x, GeluApprox::tanh).to_vector<double>();
      std::vector<double> ge = gelu_grad(g, x).to_vector<double>();
      std::vector<double> gh = gelu_grad(g, x, GeluApprox::tanh).to_vector<double>();
      for (size_t i = 0; i < known.size(); ++i) {
        const Known& k = known[i];
        EXPECT_NEAR(e[i], k.gelu, rtol * std::fabs(k.gelu)) << "gelu(" << k.x << ")";
        EXPECT_NEAR(h[i], k.gelu_tanh, rtol * std::fabs(k.gelu_tanh)) << "gelu_tanh(" << k.x << ")";
        EXPECT_NEAR(ge[i], k.grad, rtol * std::fabs(k.grad)) << "gelu'(" << k.x << ")";
        EXPECT_NEAR(gh[i], k.tanh_grad, rtol * std::fabs(k.tanh_grad))
            << "gelu_tanh'(" << k.x << ")";
      }
    }
}

// Far out GELU is x or 0 and its gradient 1 or 0, never NaN from inf * 0; negative inputs keep
// their small values to a few ulps (0.5 x (1 + erf) written plainly loses them in float).
TEST(Elementwise, GeluStableForLargeAndNegativeInputs) {
  std::vector<double> xs{-1e30, -1000, -40, -9, -5, 5, 9, 40, 1000, 1e30};
  for (DType dt : {DType::float32, DType::float64}) {
    SCOPED_TRACE(std::string(name(dt)));
    Tensor x = from_data(xs, Shape{int64_t(xs.size())}, dt);
    Tensor g = ones({int64_t(xs.size())}, dt);
    for (GeluApprox a : {GeluApprox::none, GeluApprox::tanh}) {
      SCOPED_TRACE(a == GeluApprox::none ? "none" : "tanh");
      auto ref = a == GeluApprox::none ? gelu_far : gelu_tanh_far;
      auto ref_grad = a == GeluApprox::none ? gelu_grad_ref : gelu_tanh_grad_ref;
      std::vector<double> y = gelu(x, a).to_vector<double>();
      std::vector<double> dy = gelu_grad(g, x, a).to_vector<double>();
      for (size_t i = 0; i < xs.size(); ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << "gelu(" << xs[i] << ")";
        ASSERT_TRUE(std::isfinite(dy[i])) << "gelu'(" << xs[i] << ")";
        const double want = xs[i] > 0 ? xs[i] : 0.0;
        if (std::fabs(xs[i]) >= 40) {
          EXPECT_EQ(y[i], dt == DType::float32 ? double(float(want)) : want) << xs[i];
          EXPECT_EQ(dy[i], xs[i] > 0 ? 1.0 : 0.0) << xs[i];
        } else if (xs[i] < 0) {
          // gelu(-5) is about -1.4e-6 and gelu(-9) about -1e-18. The function's condition
          // number grows as x^2 (x^3 for tanh): a few hundred ulps in float, not 100 %.
          const double r = ref(xs[i]);
          EXPECT_NEAR(y[i], r, (dt == DType::float32 ? 1e-4 : 2e-13) * std::fabs(r)) << xs[i];
          EXPECT_NEAR(dy[i], ref_grad(xs[i]), 1e-7) << xs[i];
        }
      }
    }
  }
}

TEST(Elementwise, MaximumPropagatesNaN) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = from_data({nan, 1.0, 2.0}, Shape{3}, DType::float64);
  Tensor b = from_data({0.0, nan, 1.0}, Shape{3}, DType::float64);
  std::vector<double> m = maximum(a, b).to_vector<double>();
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_TRUE(std::isnan(m[1]));
  EXPECT_EQ(m[2], 2.0);
}

// neg and abs on signed zeros, as IEEE and PyTorch have them: neg flips the sign bit
// (1 / neg(0.0) is -inf), abs clears it. neg was computed as 0 - a, which gave +0.0 (found by
// the random API driver). On the CPU and on every device of the suite.
TEST(Elementwise, NegAndAbsOfSignedZeros) {
  std::vector<Device> devices = test::case_devices();
  devices.insert(devices.begin(), Device::cpu());
  for (Device d : devices)
    for (DType t : {DType::float32, DType::float64}) {
      SCOPED_TRACE(d.str() + " " + std::string(name(t)));
      Tensor z = from_data({0.0, -0.0}, Shape{2}, t, d);
      std::vector<double> n = neg(z).to_vector<double>(), a = abs(z).to_vector<double>();
      std::vector<double> r = rdiv(1, neg(z)).to_vector<double>();
      EXPECT_TRUE(std::signbit(n[0]) && !std::signbit(n[1])) << n[0] << " " << n[1];
      EXPECT_TRUE(!std::signbit(a[0]) && !std::signbit(a[1])) << a[0] << " " << a[1];
      EXPECT_EQ(r[0], -std::numeric_limits<double>::infinity());
      EXPECT_EQ(r[1], std::numeric_limits<double>::infinity());
    }
}

// Comparisons with a non-integral scalar on integer tensors must compare the values, not the
// scalar truncated to the integer type (0 < 0.5 is true; 0 == 0.5 is false).
TEST(Elementwise, IntegerComparisonWithFractionalScalar) {
  Tensor x = from_vector<int32_t>({-1, 0, 1, 2}, Shape{4});
  EXPECT_EQ(lt(x, 0.5).to_vector<float>(), std::vector<float>({1, 1, 0, 0}));
  EXPECT_EQ(eq(x, 0.5).to_vector<float>(), std::vector<float>({0, 0, 0, 0}));
  EXPECT_EQ(gt(x, -0.5).to_vector<float>(), std::vector<float>({0, 1, 1, 1}));
}

// The gradient of a broadcast over an empty trailing dim: (3, 0) + (0,) -> (3, 0).
TEST(Elementwise, GradientOfEmptyBroadcast) {
  Tensor a = zeros({3, 0}, DType::float64).requires_grad_();
  Tensor b = zeros({0}, DType::float64).requires_grad_();
  try {
    sum(add(a, b)).backward();
    ASSERT_TRUE(a.grad().defined() && b.grad().defined());
    EXPECT_EQ(a.grad().shape(), (Shape{3, 0}));
    EXPECT_EQ(b.grad().shape(), (Shape{0}));
  } catch (const Error& e) {
    ADD_FAILURE() << "backward through an empty broadcast threw: " << e.what();
  }
}

// ---- argument errors: "[op]", the shapes, thrown at the call --------------------------------

TEST(ElementwiseErrors, BroadcastMismatch) {
  Tensor a = ones({2, 3}), b = ones({4});
  EXPECT_TIDE_ERROR(add(a, b), "[add]", "(2, 3)", "(4,)");
  EXPECT_TIDE_ERROR(sub(a, b), "[sub]", "(2, 3)", "(4,)");
  EXPECT_TIDE_ERROR(a * b, "[mul]", "(2, 3)", "(4,)");
  EXPECT_TIDE_ERROR(div(b, a), "[div]", "(2, 3)", "(4,)");
  EXPECT_TIDE_ERROR(maximum(a, b), "[maximum]", "(2, 3)", "(4,)");
  EXPECT_TIDE_ERROR(eq(a, b), "[eq]", "(2, 3)", "(4,)");
  EXPECT_TIDE_ERROR(gt(a, ones({3, 3})), "[gt]", "(2, 3)", "(3, 3)");
  EXPECT_TIDE_ERROR(lt(ones({2, 1, 5}), ones({3, 4})), "[lt]", "(2, 1, 5)", "(3, 4)");
}

TEST(ElementwiseErrors, DtypeMismatch) {
  Tensor a = ones({2, 3}), b = ones({2, 3}, DType::float64), i = ones({2, 3}, DType::int32);
  EXPECT_TIDE_ERROR(add(a, b), "[add]", "(2, 3)", "float32", "float64");
  EXPECT_TIDE_ERROR(mul(i, a), "[mul]", "(2, 3)", "int32", "float32");
  EXPECT_TIDE_ERROR(maximum(a, i), "[maximum]", "(2, 3)", "int32");
  EXPECT_TIDE_ERROR(lt(b, a), "[lt]", "(2, 3)", "float64", "float32");
}

TEST(ElementwiseErrors, FloatingOnlyOpsRejectIntegers) {
  Tensor i = ones({2, 3}, DType::int32), l = ones({4}, DType::int64);
  EXPECT_TIDE_ERROR(div(i, i), "[div]", "(2, 3)", "int32");
  EXPECT_TIDE_ERROR(div(l, 2.0), "[div]", "(4,)", "int64");
  EXPECT_TIDE_ERROR(rdiv(1.0, l), "[div]", "(4,)");
  EXPECT_TIDE_ERROR(exp(i), "[exp]", "(2, 3)");
  EXPECT_TIDE_ERROR(log(i), "[log]", "(2, 3)");
  EXPECT_TIDE_ERROR(sqrt(l), "[sqrt]", "(4,)");
  EXPECT_TIDE_ERROR(pow(i, 2.0), "[pow]", "(2, 3)");
  EXPECT_TIDE_ERROR(sigmoid(l), "[sigmoid]", "(4,)");
  EXPECT_TIDE_ERROR(tanh(i), "[tanh]", "(2, 3)");
  EXPECT_TIDE_ERROR(gelu(i), "[gelu]", "(2, 3)", "int32");
  EXPECT_TIDE_ERROR(gelu(l, GeluApprox::tanh), "[gelu_tanh]", "(4,)", "int64");
  EXPECT_TIDE_ERROR(gelu_grad(i, i), "[gelu_grad]", "(2, 3)");
  EXPECT_TIDE_ERROR(gelu_grad(l, l, GeluApprox::tanh), "[gelu_tanh_grad]", "(4,)");
  EXPECT_TIDE_ERROR(gelu_grad(ones({2, 3}), ones({4})), "[gelu_grad]", "(2, 3)", "(4,)");
}

TEST(ElementwiseErrors, InPlaceIntoASmallerShape) {
  Tensor small = ones({3}), big = ones({2, 3});
  EXPECT_TIDE_ERROR(small.add_(big), "[add_]", "(3,)", "(2, 3)");
  EXPECT_TIDE_ERROR(small.sub_(big, 2.0), "[sub_]", "(3,)", "(2, 3)");
  EXPECT_TIDE_ERROR(small.mul_(big), "[mul_]", "(3,)", "(2, 3)");
  EXPECT_TIDE_ERROR(small.copy_(big), "[copy_]", "(3,)", "(2, 3)");
  EXPECT_TIDE_ERROR(ones({2, 3}).add_(ones({4})), "[add_]", "(2, 3)", "(4,)");
  EXPECT_TIDE_ERROR(small.copy_(ones({3}, DType::float64)), "[copy_]", "(3,)", "float64");
  // Nothing was queued: the target is unchanged.
  EXPECT_EQ(small.to_vector<float>(), std::vector<float>(3, 1.0f));
}

TEST(ElementwiseErrors, InPlaceOnALeafRequiringGrad) {
  Tensor w = ones({2, 3}).requires_grad_();
  EXPECT_TIDE_ERROR(w.add_(ones({2, 3})), "[add_]", "(2, 3)");
  EXPECT_TIDE_ERROR(w.sub_(ones({3})), "[sub_]", "(2, 3)");
  EXPECT_TIDE_ERROR(w.mul_(2.0), "[mul_]", "(2, 3)");
  EXPECT_TIDE_ERROR(w.copy_(zeros({2, 3})), "[copy_]", "(2, 3)");
  // Also on a non-leaf that records a gradient.
  Tensor y = w * 2.0;
  EXPECT_TIDE_ERROR(y.add_(ones({1})), "[add_]", "(2, 3)");
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(6, 1.0f));
}

// Issue 11 item 14: a scalar combined with an integer tensor is converted to the tensor's
// dtype, which is undefined behaviour for NaN, infinities and values out of its range
// (add(int32 [1, 2, 3], 1e30) once gave -2147483647...). Refused at the call, for every op.
TEST(ElementwiseErrors, ScalarsAnIntegerTensorCannotHold) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (Device d : {Device::cpu(), test::case_devices()[0]}) {
    SCOPED_TRACE(d.str());
    Tensor i = from_vector<int32_t>({1, 2, 3}, Shape{3}, d);
    Tensor l = from_vector<int64_t>({1, 2, 3}, Shape{3}, d);
    Tensor j = from_vector<int32_t>({4, 5}, Shape{2}, d);
    Tensor one = ones({2}, DType::int32, d);
    const uint64_t queued = Engine::get().stats().queued;
    EXPECT_TIDE_ERROR(add(i, 1e30), "[add]", "scalar 1e+30", "outside the range of int32",
                      "(3,) int32");
    EXPECT_TIDE_ERROR(i + 2147483648.0, "[add]", "scalar 2147483648", "int32");
    EXPECT_TIDE_ERROR(sub(i, -2147483649.0), "[sub]", "-2147483649", "int32");
    EXPECT_TIDE_ERROR(rsub(3e9, i), "[sub]", "scalar 3e+09", "int32");
    EXPECT_TIDE_ERROR(mul(l, 9223372036854775808.0), "[mul]", "9223372036854775808", "int64");
    EXPECT_TIDE_ERROR(maximum(l, -1e19), "[maximum]", "-1e+19", "int64");
    EXPECT_TIDE_ERROR(add(i, nan), "[add]", "scalar nan", "not finite", "(3,) int32");
    EXPECT_TIDE_ERROR(add(l, inf), "[add]", "scalar inf", "not finite");
    EXPECT_TIDE_ERROR(sub(l, -inf), "[sub]", "scalar -inf");
    // Comparisons too: x < 1e30 or x == NaN cannot be computed in the tensor's dtype.
    EXPECT_TIDE_ERROR(lt(i, 1e30), "[lt]", "1e+30", "int32");
    EXPECT_TIDE_ERROR(gt(l, -inf), "[gt]", "-inf", "int64");
    EXPECT_TIDE_ERROR(eq(i, nan), "[eq]", "nan", "int32");
    EXPECT_TIDE_ERROR(lt(i, 2147483647.5), "[lt]", "int32");
    // In place: mul_'s factor and the alpha of add_ / sub_ are converted the same way (a
    // fractional factor was once truncated: x.mul_(0.5) zeroed an integer tensor).
    EXPECT_TIDE_ERROR(j.mul_(0.5), "[mul_]", "scalar 0.5", "not an integer", "(2,) int32");
    EXPECT_TIDE_ERROR(j.mul_(1e10), "[mul_]", "1e+10", "int32");
    EXPECT_TIDE_ERROR(j.mul_(nan), "[mul_]", "nan");
    EXPECT_TIDE_ERROR(j.add_(one, 0.5), "[add_]", "alpha 0.5", "not an integer");
    EXPECT_TIDE_ERROR(j.add_(one, inf), "[add_]", "alpha inf", "not finite");
    EXPECT_TIDE_ERROR(j.sub_(one, -3e9), "[sub_]", "alpha -3e+09", "int32");
    EXPECT_EQ(Engine::get().stats().queued, queued) << "nothing was queued";
    EXPECT_EQ(j.to_vector<int32_t>(), (std::vector<int32_t>{4, 5}));

    // The extremes of each range are accepted, and computed exactly.
    Tensor ext = from_vector<int32_t>({-2147483647 - 1, 0, 2147483647}, Shape{3}, d);
    EXPECT_EQ(eq(ext, 2147483647.0).to_vector<float>(), (std::vector<float>{0, 0, 1}));
    EXPECT_EQ(eq(ext, -2147483648.0).to_vector<float>(), (std::vector<float>{1, 0, 0}));
    EXPECT_EQ(lt(l, -9223372036854775808.0).to_vector<float>(), (std::vector<float>{0, 0, 0}));
    EXPECT_EQ(add(l, -3.0).to_vector<int64_t>(), (std::vector<int64_t>{-2, -1, 0}));
    j.mul_(3.0);
    j.add_(one, -2.0);
    EXPECT_EQ(j.to_vector<int32_t>(), (std::vector<int32_t>{10, 13}));
    // Floating tensors take any double, NaN and infinities included.
    Tensor f = from_vector<float>({1, 2}, Shape{2}, d);
    EXPECT_EQ(add(f, 1e30).to_vector<float>(), (std::vector<float>{1e30f, 1e30f}));
    EXPECT_TRUE(std::isnan(add(f, nan).to_vector<float>()[0]));
    EXPECT_EQ(lt(f, inf).to_vector<float>(), (std::vector<float>{1, 1}));
  }
}

TEST(ElementwiseErrors, UndefinedTensor) {
  Tensor u;
  EXPECT_TIDE_ERROR(add(u, ones({2})), "[add]");
  EXPECT_TIDE_ERROR(exp(u), "[exp]");
}

// Found by the random API driver: integer overflow in a kernel was undefined behaviour
// (UBSan stopped the process). Integer arithmetic wraps around, as NumPy's and PyTorch's
// does, on every device (the functors are shared with CUDA).
TEST(Elementwise, IntegerOverflowWrapsAround) {
  std::vector<Device> devices = test::case_devices();
  devices.insert(devices.begin(), Device::cpu());
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  for (Device d : devices) {
    Tensor big = from_vector(std::vector<int32_t>{kMax, kMin}, Shape{2}, d);
    EXPECT_EQ(add(big, big).to_vector<int32_t>(), (std::vector<int32_t>{-2, 0})) << d.str();
    EXPECT_EQ(sub(big, from_vector(std::vector<int32_t>{-1, 1}, Shape{2}, d)).to_vector<int32_t>(),
              (std::vector<int32_t>{kMin, kMax}))
        << d.str();
    EXPECT_EQ(mul(big, 2.0).to_vector<int32_t>(), (std::vector<int32_t>{-2, 0})) << d.str();
    EXPECT_EQ(neg(big).to_vector<int32_t>(), (std::vector<int32_t>{-kMax, kMin})) << d.str();
    EXPECT_EQ(abs(big).to_vector<int32_t>(), (std::vector<int32_t>{kMax, kMin})) << d.str();
    Tensor x = clone(big);
    x.add_(big);
    EXPECT_EQ(x.to_vector<int32_t>(), (std::vector<int32_t>{-2, 0})) << d.str();
    constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
    Tensor s = sum(from_vector(std::vector<int64_t>{kMax64, 1}, Shape{2}, d));
    EXPECT_EQ(s.item<int64_t>(), std::numeric_limits<int64_t>::min()) << d.str();
  }
}

}  // namespace
}  // namespace tide
