// The normalisation family (ops/norm.h): layer_norm with and without weight and bias, and
// layer_norm_grad's three outputs, against double-precision loops written here; gradients
// by float64 central differences; argument errors; results independent of the thread
// count; traced replays bitwise equal to eager on the CPU and the fake GPU.
#include <cmath>

#include "core/thread_pool.h"
#include "tests/ops/op_harness.h"
#include "trace/function.h"

namespace tide {
namespace {

using test::Array;
using test::OpCase;
using test::ShapeSet;
using test::Tol;
using V = std::vector<Tensor>;

constexpr double kEps = 1e-5;

// Mean and 1 / sqrt(biased variance + eps) of each row of x over its last dimension.
void row_stats(const Array& x, std::vector<double>& mean, std::vector<double>& rstd) {
  const int64_t d = x.shape[x.shape.ndim() - 1], rows = d > 0 ? x.shape.numel() / d : 0;
  mean.assign(size_t(rows), 0.0);
  rstd.assign(size_t(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0, sq = 0;
    for (int64_t j = 0; j < d; ++j) s += x.v[size_t(r * d + j)];
    const double m = s / double(d);
    for (int64_t j = 0; j < d; ++j)
      sq += (x.v[size_t(r * d + j)] - m) * (x.v[size_t(r * d + j)] - m);
    mean[size_t(r)] = m;
    rstd[size_t(r)] = 1.0 / std::sqrt(sq / double(d) + kEps);
  }
}

// in: x, then weight when has_w, then bias when has_b.
Array ln_ref(const std::vector<Array>& in, bool has_w, bool has_b) {
  const Array& x = in[0];
  const Array* w = has_w ? &in[1] : nullptr;
  const Array* b = has_b ? &in[has_w ? 2 : 1] : nullptr;
  const int64_t d = x.shape[x.shape.ndim() - 1];
  std::vector<double> mean, rstd;
  row_stats(x, mean, rstd);
  Array y{x.shape, x.v};
  for (size_t k = 0; k < y.v.size(); ++k) {
    const size_t r = k / size_t(d), j = k % size_t(d);
    double v = (x.v[k] - mean[r]) * rstd[r];
    if (w) v *= w->v[j];
    if (b) v += b->v[j];
    y.v[k] = v;
  }
  return y;
}

// x shapes: 2-D and 3-D, D = 1, a large D, an empty batch, and enough rows for several
// chunks of the gradient's split and for the parallel path.
std::vector<Shape> ln_x_shapes() {
  return {Shape{3, 5}, Shape{2, 3, 4}, Shape{4, 1},    Shape{7},        Shape{2, 2, 1, 3},
          Shape{0, 6}, Shape{2, 3000}, Shape{300, 17}, Shape{4, 40, 24}};
}

OpCase ln_case(bool has_w, bool has_b) {
  return OpCase{
      .op = OpId::layer_norm,
      .build =
          [has_w, has_b](const V& in) {
            const Tensor w = has_w ? in[1] : Tensor();
            const Tensor b = has_b ? in[has_w ? 2 : 1] : Tensor();
            return layer_norm(in[0], w, b, kEps);
          },
      .ref = [has_w, has_b](const std::vector<Array>& in) { return ln_ref(in, has_w, has_b); },
      .shapes =
          [has_w, has_b](std::mt19937&) {
            std::vector<ShapeSet> sets;
            for (const Shape& s : ln_x_shapes()) {
              const Shape d{s[s.ndim() - 1]};
              ShapeSet set{s};
              if (has_w) set.push_back(d);
              if (has_b) set.push_back(d);
              sets.push_back(set);
            }
            return sets;
          },
      .tol32 = Tol{1e-5, 1e-4},
      .grad = true,
      .grad_tol = Tol{1e-6, 1e-5}};
}

TIDE_OP_CASES(Norm, LayerNorm) {
  return {ln_case(true, true), ln_case(false, false), ln_case(true, false), ln_case(false, true)};
}

// layer_norm_grad's three outputs, each against the closed form from the rows' statistics.
TIDE_OP_CASES(Norm, LayerNormGrad) {
  std::vector<OpCase> cases;
  for (bool has_w : {true, false})
    for (int which = 0; which < 3; ++which) {
      OpCase c{.op = OpId::layer_norm_grad,
               .build =
                   [has_w, which](const V& in) {
                     // in: dy, x (, weight).
                     Array x{in[1].shape(), in[1].to_vector<double>()};
                     std::vector<double> mean, rstd;
                     row_stats(x, mean, rstd);
                     std::vector<double> st = mean;
                     st.insert(st.end(), rstd.begin(), rstd.end());
                     Tensor stats = from_data(st, Shape{2, int64_t(mean.size())}, in[1].dtype(),
                                              in[1].device());
                     LayerNormGrads g =
                         layer_norm_grad(in[0], in[1], has_w ? in[2] : Tensor(), stats, which > 0);
                     return which == 0 ? g.x : which == 1 ? g.weight : g.bias;
                   },
               .ref =
                   [has_w, which](const std::vector<Array>& in) {
                     const Array &dy = in[0], &x = in[1];
                     const int64_t d = x.shape[x.shape.ndim() - 1];
                     const int64_t rows = d > 0 ? x.shape.numel() / d : 0;
                     std::vector<double> mean, rstd;
                     row_stats(x, mean, rstd);
                     std::vector<double> dw(size_t(d), 0.0), db(size_t(d), 0.0);
                     Array dx{x.shape, x.v};
                     for (int64_t r = 0; r < rows; ++r) {
                       double sg = 0, sgx = 0;
                       for (int64_t j = 0; j < d; ++j) {
                         const size_t k = size_t(r * d + j);
                         const double xhat = (x.v[k] - mean[size_t(r)]) * rstd[size_t(r)];
                         const double g = dy.v[k] * (has_w ? in[2].v[size_t(j)] : 1.0);
                         sg += g;
                         sgx += g * xhat;
                         dw[size_t(j)] += dy.v[k] * xhat;
                         db[size_t(j)] += dy.v[k];
                       }
                       for (int64_t j = 0; j < d; ++j) {
                         const size_t k = size_t(r * d + j);
                         const double xhat = (x.v[k] - mean[size_t(r)]) * rstd[size_t(r)];
                         const double g = dy.v[k] * (has_w ? in[2].v[size_t(j)] : 1.0);
                         dx.v[k] = rstd[size_t(r)] * (g - sg / double(d) - xhat * sgx / double(d));
                       }
                     }
                     if (which == 1) return Array{Shape{d}, dw};
                     if (which == 2) return Array{Shape{d}, db};
                     return dx;
                   },
               .shapes =
                   [has_w](std::mt19937&) {
                     std::vector<ShapeSet> sets;
                     for (const Shape& s : ln_x_shapes()) {
                       ShapeSet set{s, s};
                       if (has_w) set.push_back(Shape{s[s.ndim() - 1]});
                       sets.push_back(set);
                     }
                     return sets;
                   },
               .tol32 = Tol{1e-4, 1e-4}};
      cases.push_back(c);
    }
  return cases;
}

TEST(NormErrors, LayerNorm) {
  Tensor x = zeros({2, 3});
  EXPECT_TIDE_ERROR(layer_norm(full(Shape{}, 1.0)), "[layer_norm]", "rank >= 1", "()");
  EXPECT_TIDE_ERROR(layer_norm(x, zeros({4})), "[layer_norm]", "weight", "(4,)", "(D,) = (3,)",
                    "(2, 3)");
  EXPECT_TIDE_ERROR(layer_norm(x, zeros({1, 3})), "[layer_norm]", "weight", "(1, 3)");
  EXPECT_TIDE_ERROR(layer_norm(x, zeros({3}), zeros({2})), "[layer_norm]", "bias", "(2,)");
  EXPECT_TIDE_ERROR(layer_norm(x, zeros({3}, DType::float64)), "[layer_norm]", "dtypes differ");
  EXPECT_TIDE_ERROR(layer_norm(zeros({2, 3}, DType::int32)), "[layer_norm]", "floating");
  EXPECT_TIDE_ERROR(layer_norm(x, Tensor(), Tensor(), 0.0), "[layer_norm]", "eps > 0");
  Tensor stats = zeros({2, 2});
  EXPECT_TIDE_ERROR(layer_norm_grad(zeros({2, 4}), x, Tensor(), stats), "[layer_norm_grad]",
                    "x's shape");
  EXPECT_TIDE_ERROR(layer_norm_grad(x, x, Tensor(), zeros({2, 3})), "[layer_norm_grad]", "stats",
                    "(2, 3)", "(2, 2)");
  // 16-bit x keeps float32 statistics.
  Tensor xb = zeros({2, 3}, DType::bfloat16);
  EXPECT_TIDE_ERROR(layer_norm_grad(xb, xb, Tensor(), zeros({2, 2}, DType::bfloat16)),
                    "[layer_norm_grad]", "stats", "must be float32");
}

TEST(NormErrors, LayerNormDevicesDiffer) {
  auto devices = test::case_devices();
  if (devices.empty()) GTEST_SKIP() << "no second device";
  Tensor x = zeros({2, 3});
  Tensor w = ones({3}, DType::float32, devices[0]);
  EXPECT_TIDE_ERROR(layer_norm(x, w), "[layer_norm]", "devices differ");
}

// The gradient's split of the rows depends only on the row count: dweight, dbias and dx
// take the same bits on one thread and on several.
TEST(Norm, LayerNormGradientsDoNotDependOnTheThreadCount) {
  Generator gen(11);
  const Tensor x0 = randn({513, 96}, DType::float32, gen),
               dy = randn({513, 96}, DType::float32, gen);
  const Tensor w0 = randn({96}, DType::float32, gen), b0 = randn({96}, DType::float32, gen);
  auto run = [&] {
    Tensor x = clone(x0).requires_grad_(), w = clone(w0).requires_grad_(),
           b = clone(b0).requires_grad_();
    Tensor y = layer_norm(x, w, b);
    sum(mul(y, dy)).backward();
    return std::vector<std::vector<float>>{y.to_vector<float>(), x.grad().to_vector<float>(),
                                           w.grad().to_vector<float>(),
                                           b.grad().to_vector<float>()};
  };
  const auto [one, four] = test::at_thread_counts(1, 4, run);
  EXPECT_EQ(one, four);
}

// A transformer-style block and its gradients traced with trace::function: every replay
// gives the eager bits, on the CPU and on the fake GPU.
TEST(Norm, TracedLayerNormMatchesEagerBitwise) {
  std::vector<Device> devices{Device::cpu()};
  for (Device d : test::case_devices())
    if (op_supported(d, OpId::layer_norm)) devices.push_back(d);
  for (Device dev : devices) {
    SCOPED_TRACE(dev.str());
    Generator gen{5};
    const Tensor x = randn({2, 6, 32}, DType::float32, gen).to(dev);
    const Tensor w0 = randn({32, 32}, DType::float32, gen).to(dev);
    struct State {
      Tensor gamma, beta, w;
    };
    auto make = [&] {
      return State{ones({32}, DType::float32, dev).requires_grad_(),
                   zeros({32}, DType::float32, dev).requires_grad_(), clone(w0).requires_grad_()};
    };
    auto step = [](State& s, const Tensor& in) {
      for (Tensor* t : {&s.gamma, &s.beta, &s.w}) t->zero_grad();
      Tensor h = layer_norm(in, s.gamma, s.beta).reshape({12, 32});
      h = layer_norm(tanh(matmul(h, s.w)));
      Tensor loss = sum(mul(h, h));
      loss.backward();
      return loss;
    };
    State eager = make(), traced = make();
    auto f = trace::function([&](const Tensor& in) { return step(traced, in); }, {.name = "ln"});
    for (int i = 0; i < 3; ++i) {
      Tensor le = step(eager, x), lt = f(x);
      auto host = [](const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); };
      EXPECT_EQ(host(lt), host(le)) << "call " << i;
      EXPECT_EQ(host(traced.gamma.grad()), host(eager.gamma.grad())) << "call " << i;
      EXPECT_EQ(host(traced.beta.grad()), host(eager.beta.grad())) << "call " << i;
      EXPECT_EQ(host(traced.w.grad()), host(eager.w.grad())) << "call " << i;
    }
  }
}

}  // namespace
}  // namespace tide
