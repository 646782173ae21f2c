// matmul (all four transpose flags), transpose, softmax and log_softmax through the harness
// against double loops, with gradients; row sums, large-input stability and the errors.
// Not here: BLAS performance (bench/).
#include <array>
#include <cmath>

#include "core/allocator.h"
#include "core/cuda/runtime.h"
#include "error_of.h"
#include "tests/ops/op_harness.h"
#include "tests/ops/runs_cpu_kernels.h"

namespace tide {
namespace {

using test::Array;
using test::Check;
using test::OpCase;
using test::ShapeSet;
using V = std::vector<Tensor>;

// op(a) @ op(b) with plain loops in double.
Array matmul_ref(const Array& a, const Array& b, bool ta, bool tb) {
  int64_t m = ta ? a.shape[1] : a.shape[0], k = ta ? a.shape[0] : a.shape[1];
  int64_t n = tb ? b.shape[0] : b.shape[1];
  Array c{Shape{m, n}, std::vector<double>(static_cast<size_t>(m * n), 0.0)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        double x = ta ? a.v[size_t(p * a.shape[1] + i)] : a.v[size_t(i * a.shape[1] + p)];
        double y = tb ? b.v[size_t(j * b.shape[1] + p)] : b.v[size_t(p * b.shape[1] + j)];
        s += x * y;
      }
      c.v[size_t(i * n + j)] = s;
    }
  return c;
}

// Shape sets (m, k, n) stored as the shapes of a and b under the flags.
test::ShapesFn matmul_shapes(bool ta, bool tb) {
  return [=](std::mt19937& rng) {
    std::uniform_int_distribution<int64_t> d(2, 9);
    std::vector<std::array<int64_t, 3>> mkn{{d(rng), d(rng), d(rng)},
                                            {d(rng), d(rng), d(rng)},
                                            {1, d(rng), d(rng)},
                                            {d(rng), d(rng), 1},
                                            {d(rng), 1, d(rng)},
                                            {1, 1, 1},
                                            {0, d(rng), 3},
                                            {3, 0, 4},
                                            {4, 5, 0},
                                            {37, 64, 29}};
    std::vector<ShapeSet> out;
    for (auto [m, k, n] : mkn)
      out.push_back({ta ? Shape{k, m} : Shape{m, k}, tb ? Shape{n, k} : Shape{k, n}});
    return out;
  };
}

TIDE_OP_CASES(Linalg, Matmul) {
  std::vector<OpCase> v;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      v.push_back(OpCase{
          .op = OpId::matmul,
          .build =
              [=](const V& x) {
                return matmul(x[0], x[1], {ta, tb});
              },
          .ref = [=](const std::vector<Array>& in) { return matmul_ref(in[0], in[1], ta, tb); },
          .shapes = matmul_shapes(ta, tb),
          .gen = test::gen_uniform(-1, 1),
          .tol32 = {1e-5, 1e-5},  // K up to 64 float32 products
          .grad = true});
  return v;
}

// linear(x, w, b, act) = x @ w + b, then ReLU or GELU's tanh form: the Linear layer's
// one-kernel form.
TIDE_OP_CASES(Linalg, Linear) {
  std::vector<OpCase> v;
  for (Activation act : {Activation::none, Activation::relu, Activation::gelu_tanh})
    v.push_back(OpCase{
        .op = OpId::linear,
        .build = [=](const V& x) { return linear(x[0], x[1], x[2], act); },
        .ref =
            [=](const std::vector<Array>& in) {
              Array y = matmul_ref(in[0], in[1], false, false);
              int64_t n = in[1].shape[1];
              for (size_t i = 0; i < y.v.size(); ++i) {
                double& h = y.v[i];
                h += in[2].v[i % size_t(std::max<int64_t>(n, 1))];
                if (act == Activation::relu && h < 0) h = 0;
                if (act == Activation::gelu_tanh)
                  h = 0.5 * h * (1 + std::tanh(std::sqrt(2 / M_PI) * (h + 0.044715 * h * h * h)));
              }
              return y;
            },
        .shapes =
            [](std::mt19937& rng) {
              std::uniform_int_distribution<int64_t> d(1, 9);
              std::vector<ShapeSet> out;
              for (auto [m, k, n] : std::vector<std::array<int64_t, 3>>{{d(rng), d(rng), d(rng)},
                                                                        {1, d(rng), d(rng)},
                                                                        {d(rng), d(rng), 1},
                                                                        {3, 0, 4},
                                                                        {0, 5, 2},
                                                                        {37, 64, 29}})
                out.push_back({Shape{m, k}, Shape{k, n}, Shape{n}});
              return out;
            },
        .gen = test::gen_uniform(-1, 1),
        .tol32 = {1e-5, 1e-5},
        .grad = true});
  return v;
}

TEST(Linalg, LinearChecksItsShapes) {
  EXPECT_TIDE_ERROR(linear(ones({2, 3}), ones({4, 5}), ones({5})), "[linear]", "(2, 3)", "(4, 5)");
  EXPECT_TIDE_ERROR(linear(ones({2, 3}), ones({3, 5}), ones({4})), "[linear]", "(4,)");
  EXPECT_TIDE_ERROR(linear(ones({2, 3}), ones({3, 5}, DType::float64), ones({5})), "[linear]",
                    "dtypes differ");
}

// GELU after the bias in the kernel gives the bits of gelu(linear(...)), value and gradients,
// in every floating dtype on the CPU and the fake GPU (a real GPU: within 1e-6 relative, or
// a 16-bit ulp); one row part, several (a GEMM past kSmallGemm), and K = 0.
TEST(Linalg, LinearGeluIsGeluOfLinearBitwise) {
  std::vector<Device> devices = test::case_devices();
  devices.insert(devices.begin(), Device::cpu());
  for (Device d : devices)
    for (DType t : {DType::float32, DType::float64, DType::bfloat16, DType::float16})
      for (std::array<int64_t, 3> s :
           {std::array<int64_t, 3>{5, 7, 9}, {130, 64, 200}, {3, 0, 4}}) {
        const int64_t m = s[0], k = s[1], n = s[2];
        SCOPED_TRACE(d.str() + " " + std::string(name(t)) + " " + std::to_string(m) + "x" +
                     std::to_string(k) + "x" + std::to_string(n));
        Generator gen(5);
        auto input = [&](Shape sh) { return cast(randn(sh, DType::float32, gen), t).to(d); };
        const Tensor x0 = input({m, k}), w0 = input({k, n}), b0 = input({n}), wy = input({m, n});
        auto run = [&](bool fused) {
          Tensor x = clone(x0).requires_grad_(), w = clone(w0).requires_grad_(),
                 b = clone(b0).requires_grad_();
          Tensor y = fused ? linear(x, w, b, Activation::gelu_tanh)
                           : gelu(linear(x, w, b), GeluApprox::tanh);
          sum(mul(y, wy)).backward();
          std::vector<std::vector<double>> out;
          for (const Tensor& r : {y, x.grad(), w.grad(), b.grad()})
            out.push_back(cast(r, DType::float64).to_vector<double>());
          return out;
        };
        const auto fused = run(true), apart = run(false);
        const char* names[] = {"y", "dx", "dw", "db"};
        const double rel = t == DType::bfloat16 ? 0x1p-7 : t == DType::float16 ? 0x1p-10 : 1e-6;
        for (size_t i = 0; i < fused.size(); ++i) {
          if (test::runs_cpu_kernels(d)) {
            EXPECT_EQ(fused[i], apart[i]) << names[i];
            continue;
          }
          for (size_t j = 0; j < fused[i].size(); ++j)
            ASSERT_NEAR(fused[i][j], apart[i][j], rel * (1 + std::abs(apart[i][j]))) << names[i];
        }
      }
}

TEST(Linalg, MatmulWithEmptyInnerDimIsZero) {
  // (3, 0) @ (0, 4): every output is an empty sum. Run twice so that the second output
  // reuses a cached block full of old values.
  for (int rep = 0; rep < 2; ++rep) {
    Tensor junk = full({3, 4}, 7.0);
    junk.wait_to_read();
    junk = Tensor();
    for (DType dt : {DType::float32, DType::float64}) {
      Tensor y = matmul(zeros({3, 0}, dt), zeros({0, 4}, dt));
      EXPECT_EQ(y.shape(), (Shape{3, 4}));
      EXPECT_EQ(y.to_vector<double>(), std::vector<double>(12, 0.0)) << name(dt);
    }
  }
}

TEST(Linalg, MatmulOnRowViews) {
  // Operands that are slices of a larger buffer (nonzero offset) read their own rows.
  Tensor base = arange(0.0, 24.0, 1.0, DType::float64).reshape({6, 4});
  Tensor a = base.slice(2, 4);  // rows 2, 3
  Tensor b = base.slice(0, 4);  // (4, 4)
  Array ra{Shape{2, 4}, a.to_vector<double>()}, rb{Shape{4, 4}, b.to_vector<double>()};
  EXPECT_EQ(matmul(a, b).to_vector<double>(), matmul_ref(ra, rb, false, false).v);
  EXPECT_EQ(matmul(b, a, {false, true}).to_vector<double>(), matmul_ref(rb, ra, false, true).v);
}

TEST(LinalgErrors, Matmul) {
  Tensor a = ones({64, 128}), b = ones({64, 10});
  EXPECT_TIDE_ERROR(matmul(a, b), "[matmul]", "inner", "(64, 128)", "(64, 10)");
  EXPECT_TIDE_ERROR(matmul(b, a, {false, true}), "[matmul]", "(64, 10)", "(64, 128)");
  EXPECT_TIDE_ERROR(matmul(a, b, {true, true}), "[matmul]", "(64, 128)", "(64, 10)");
  EXPECT_TIDE_ERROR(matmul(ones({3}), ones({3, 2})), "[matmul]", "(3,)", "(3, 2)");
  EXPECT_TIDE_ERROR(matmul(ones({3, 2, 2}), ones({2, 2, 2})), "[matmul]",
                    "batch dimensions do not broadcast", "(3, 2, 2)", "(2, 2, 2)");
  EXPECT_TIDE_ERROR(matmul(ones({2, 3}), ones({3, 2}, DType::float64)), "[matmul]", "(2, 3)",
                    "float64");
  EXPECT_TIDE_ERROR(matmul(ones({2, 3}, DType::int32), ones({3, 2}, DType::int32)), "[matmul]",
                    "(2, 3)", "int32");
  // The accepted form works (a^T @ b).
  EXPECT_EQ(matmul(a, b, {true, false}).shape(), (Shape{128, 10}));
}

// Issue 11 item 6: cblas and cuBLASLt take 32-bit dimensions and row strides. A product
// with one past 2^31 - 1 is refused at the call, before its output is allocated or anything
// is queued (it once allocated the 8 GiB output, then passed m = -2^31 to sgemm).
TEST(LinalgErrors, DimensionsPastTheBlasLimitAreRefusedBeforeAllocating) {
  const int64_t big = int64_t(1) << 31;
  // Operands with no elements: only the outputs would be large.
  Tensor tall = zeros({big, 0}), wide = zeros({0, big}), col = zeros({0, 1}), row = zeros({1, 0});
  Tensor bias = zeros({1});
  Engine::get().synchronize();
  const uint64_t allocs = Allocator::get().stats().num_allocs;
  const uint64_t queued = Engine::get().stats().queued;
  const char* limit = "exceeds the 32-bit dimension limit of BLAS";
  EXPECT_TIDE_ERROR(matmul(tall, col), "[matmul]", limit, "2147483648", "(2147483648, 0)",
                    "(0, 1)");
  EXPECT_TIDE_ERROR(matmul(wide, col, {true, false}), "[matmul]", limit, "2147483648");
  EXPECT_TIDE_ERROR(matmul(row, wide), "[matmul]", limit, "(0, 2147483648)");
  EXPECT_TIDE_ERROR(matmul(row, tall, {false, true}), "[matmul]", limit);
  EXPECT_TIDE_ERROR(linear(tall, col, bias), "[linear]", limit, "(2147483648, 0)");
  EXPECT_TIDE_ERROR(linear(tall, col, bias, true), "[linear]", limit);
  EXPECT_EQ(Allocator::get().stats().num_allocs, allocs) << "an output was allocated";
  EXPECT_EQ(Engine::get().stats().queued, queued) << "a kernel was queued";
  // An empty product computes nothing and passes nothing to BLAS: accepted.
  EXPECT_EQ(matmul(tall, zeros({0, 0})).shape(), (Shape{big, 0}));
  EXPECT_EQ(matmul(zeros({0, 0}), wide).shape(), (Shape{0, big}));
}

// ---- one-hot rows ---------------------------------------------------------------------------

// Values for int32 and int64 labels, float32 and float64 rows, on the CPU and the case
// devices; the rows are written whole (a cached block full of junk is reused).
TIDE_OP_TEST(Linalg, OneHot, {OpId::one_hot, Check::value}) {
  std::vector<Device> devices = test::case_devices();
  devices.insert(devices.begin(), Device::cpu());
  for (Device d : devices)
    for (DType lt : {DType::int32, DType::int64})
      for (DType dt : {DType::float32, DType::float64}) {
        SCOPED_TRACE(d.str() + " " + std::string(name(lt)) + " -> " + std::string(name(dt)));
        full({4, 5}, 7.0, dt, d).wait_to_read();
        Tensor y = one_hot(from_data({2, 0, 4, 2}, Shape{4}, lt, d), 5, dt);
        EXPECT_EQ(y.shape(), (Shape{4, 5}));
        EXPECT_EQ(y.dtype(), dt);
        EXPECT_EQ(y.device(), d);
        EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{0, 0, 1, 0, 0,  //
                                                              1, 0, 0, 0, 0,  //
                                                              0, 0, 0, 0, 1,  //
                                                              0, 0, 1, 0, 0}));
      }
  EXPECT_EQ(one_hot(zeros({0}, DType::int64), 3).shape(), (Shape{0, 3}));
  EXPECT_EQ(one_hot(zeros({1}, DType::int64), 1).to_vector<float>(), std::vector<float>{1});
}

// A label outside [0, classes) is found when the kernel runs (the call does not wait for
// the labels): the CPU fails the op, naming the label, its row and the classes, and the
// first sync that touches the result or anything computed from it throws; a real GPU's
// kernel cannot throw, so it makes that row NaN.
TEST(LinalgErrors, OneHotLabelOutsideTheClasses) {
  std::vector<Device> devices = test::case_devices();
  devices.insert(devices.begin(), Device::cpu());
  for (Device d : devices) {
    const bool fails = d.is_cpu() || cuda::runs_host_kernels(d.index);
    for (int64_t bad : {int64_t(200), int64_t(-1), int64_t(10), int64_t(1) << 33}) {
      SCOPED_TRACE(d.str() + " label " + std::to_string(bad));
      Tensor labels = from_vector<int64_t>({1, 9, bad, bad}, Shape{4}, d);
      Tensor y;
      ASSERT_NO_THROW(y = one_hot(labels, 10, DType::float32, "my_loss"));
      Tensor s = sum(y);  // computed from the failed rows
      if (fails) {
        test::expect_contains(test_util::error_of([&] { (void)y.to_vector<float>(); }),
                              {"[my_loss] label " + std::to_string(bad), "of row 2",
                               "outside the 10 classes [0, 10)", "test_linalg.cpp"},
                              "one_hot");
        EXPECT_NE(test_util::error_of([&] {
                    (void)s.item<float>();
                  }).find("label " + std::to_string(bad)),
                  std::string::npos);
      } else {
        std::vector<float> v = y.to_vector<float>();
        for (int c = 0; c < 10; ++c) {
          EXPECT_EQ(v[size_t(c)], c == 1 ? 1.0f : 0.0f);
          EXPECT_TRUE(std::isnan(v[size_t(20 + c)])) << c;
        }
        EXPECT_TRUE(std::isnan(s.item<float>()));
      }
    }
    // int32 labels, and float64 rows.
    Tensor l32 = from_vector<int32_t>({-5}, Shape{1}, d);
    Tensor y = one_hot(l32, 3, DType::float64);
    if (fails)
      EXPECT_NE(
          test_util::error_of([&] { (void)y.to_vector<double>(); }).find("[one_hot] label -5"),
          std::string::npos);
    else EXPECT_TRUE(std::isnan(y.to_vector<double>()[0]));
  }
}

TEST(LinalgErrors, OneHotArguments) {
  Tensor l = zeros({3}, DType::int64), f = zeros({3}), col = zeros({3, 1}, DType::int64);
  const uint64_t queued = Engine::get().stats().queued;
  EXPECT_TIDE_ERROR(one_hot(f, 4), "[one_hot]", "(3,) float32");
  EXPECT_TIDE_ERROR(one_hot(col, 4), "[one_hot]", "(3, 1) int64");
  EXPECT_TIDE_ERROR(one_hot(l, 0), "[one_hot]", "at least one class", "0");
  EXPECT_TIDE_ERROR(one_hot(l, 4, DType::int32), "[one_hot]", "floating", "int32");
  EXPECT_TIDE_ERROR(one_hot(f, 4, DType::float32, "my_loss"), "[my_loss]", "(3,) float32");
  EXPECT_TIDE_ERROR(one_hot(Tensor(), 4), "[one_hot]");
  EXPECT_EQ(Engine::get().stats().queued, queued) << "nothing was queued";
}

// ---- transpose -----------------------------------------------------------------------------

TIDE_OP_CASES(Linalg, Transpose) {
  OpCase c{.op = OpId::transpose,
           .build = [](const V& x) { return transpose(x[0]); },
           .ref =
               [](const std::vector<Array>& in) {
                 const Array& a = in[0];
                 int64_t r = a.shape[0], cl = a.shape[1];
                 Array t{Shape{cl, r}, std::vector<double>(a.v.size())};
                 for (int64_t i = 0; i < r; ++i)
                   for (int64_t j = 0; j < cl; ++j)
                     t.v[size_t(j * r + i)] = a.v[size_t(i * cl + j)];
                 return t;
               },
           .shapes =
               [](std::mt19937& rng) {
                 return std::vector<ShapeSet>{{test::random_shape(rng, 2, 1, 9)},
                                              {test::random_shape(rng, 2, 1, 9)},
                                              {Shape{1, 7}},
                                              {Shape{6, 1}},
                                              {Shape{0, 5}},
                                              {Shape{3, 0}},
                                              {Shape{33, 65}},  // partial cache blocks
                                              {Shape{300, 270}}};
               },
           .grad = true};
  OpCase ints = c;
  ints.dtypes = {DType::int32, DType::int64};
  ints.gen = test::gen_ints(-100, 100);
  ints.grad = false;
  return {c, ints};
}

TEST(LinalgErrors, Transpose) {
  EXPECT_TIDE_ERROR(transpose(ones({2, 3, 4})), "[transpose]", "(2, 3, 4)");
  EXPECT_TIDE_ERROR(transpose(ones({5})), "[transpose]", "(5,)");
}

// ---- swap_axes -----------------------------------------------------------------------------

// y = a with dims d0 and d1 exchanged, by walking a's elements with their indices.
Array swap_axes_ref(const Array& a, int d0, int d1) {
  const int nd = a.shape.ndim();
  Shape out = a.shape;
  std::swap(out[d0], out[d1]);
  Array y{out, std::vector<double>(a.v.size())};
  std::vector<int64_t> idx(size_t(nd), 0);
  for (size_t flat = 0; flat < a.v.size(); ++flat) {
    std::vector<int64_t> o = idx;
    std::swap(o[size_t(d0)], o[size_t(d1)]);
    int64_t pos = 0;
    for (int i = 0; i < nd; ++i) pos = pos * out[i] + o[size_t(i)];
    y.v[size_t(pos)] = a.v[flat];
    for (int i = nd - 1; i >= 0; --i) {
      if (++idx[size_t(i)] < a.shape[i]) break;
      idx[size_t(i)] = 0;
    }
  }
  return y;
}

TIDE_OP_CASES(Linalg, SwapAxes) {
  std::vector<OpCase> cases;
  // (rank, d0, d1, shapes): the attention head split (B, T, H, D) -> (B, H, T, D), the 2-D
  // transpose, non-adjacent dims, a negative dim and equal dims (a copy).
  struct Form {
    int d0, d1;
    std::vector<Shape> shapes;
  };
  for (const Form& f : std::vector<Form>{{1, 2, {Shape{2, 5, 3, 4}, Shape{1, 7, 2, 1}}},
                                         {0, 1, {Shape{4, 6}, Shape{33, 65}, Shape{0, 3}}},
                                         {0, 2, {Shape{3, 2, 5}, Shape{2, 3, 4, 2}}},
                                         {-1, -3, {Shape{2, 3, 4}}},
                                         {1, 1, {Shape{2, 3}}}}) {
    const int d0 = f.d0, d1 = f.d1;
    OpCase c{.op = OpId::swap_axes,
             .build = [d0, d1](const V& x) { return swap_axes(x[0], d0, d1); },
             .ref =
                 [d0, d1](const std::vector<Array>& in) {
                   const int nd = in[0].shape.ndim();
                   return swap_axes_ref(in[0], d0 < 0 ? d0 + nd : d0, d1 < 0 ? d1 + nd : d1);
                 },
             .shapes =
                 [f](std::mt19937&) {
                   std::vector<ShapeSet> sets;
                   for (const Shape& s : f.shapes) sets.push_back({s});
                   return sets;
                 },
             .grad = true};
    OpCase ints = c;
    ints.dtypes = {DType::int32, DType::int64};
    ints.gen = test::gen_ints(-100, 100);
    ints.grad = false;
    cases.push_back(c);
    cases.push_back(ints);
  }
  return cases;
}

TEST(LinalgErrors, SwapAxes) {
  Tensor a = ones({2, 3});
  const uint64_t queued = Engine::get().stats().queued;
  EXPECT_TIDE_ERROR(swap_axes(a, 0, 2), "[swap_axes]", "(0, 2)", "(2, 3)");
  EXPECT_TIDE_ERROR(swap_axes(a, -3, 0), "[swap_axes]", "[-2, 2)");
  EXPECT_TIDE_ERROR(swap_axes(Tensor(), 0, 1), "[swap_axes]");
  EXPECT_EQ(Engine::get().stats().queued, queued) << "nothing was queued";
}

// ---- cross-entropy rows ---------------------------------------------------------------------

Array softmax_ref(const Array& a, bool log_out);  // below, with softmax's cases

// Row r's label: (3r + 1) mod C, the same in the op and the reference.
int64_t ce_label(int64_t r, int64_t c) { return (3 * r + 1) % c; }
Tensor ce_labels(int64_t n, int64_t c, Device d, DType dt = DType::int64) {
  std::vector<double> v;
  for (int64_t r = 0; r < n; ++r) v.push_back(double(ce_label(r, c)));
  return from_data(v, Shape{n}, dt, d);
}

std::vector<ShapeSet> ce_shapes(std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> dim(1, 7);
  return {{Shape{dim(rng), dim(rng)}},
          {Shape{1, 1}},
          {Shape{5, 1}},
          {Shape{3, 9}},
          {Shape{64, 300}},
          {Shape{2, 1500}}};
}

TIDE_OP_CASES(Linalg, CrossEntropyRows) {
  OpCase c{.op = OpId::cross_entropy,
           .build =
               [](const V& x) {
                 return cross_entropy_rows(x[0],
                                           ce_labels(x[0].size(0), x[0].size(1), x[0].device()));
               },
           .ref =
               [](const std::vector<Array>& in) {
                 const int64_t n = in[0].shape[0], cl = in[0].shape[1];
                 Array lsm = softmax_ref(in[0], true);
                 Array y{Shape{n}, {}};
                 for (int64_t r = 0; r < n; ++r)
                   y.v.push_back(-lsm.v[size_t(r * cl + ce_label(r, cl))]);
                 return y;
               },
           .shapes = ce_shapes,
           .gen = test::gen_uniform(-4, 4),
           .grad = true};
  OpCase i32 = c;  // int32 labels
  i32.build = [](const V& x) {
    return cross_entropy_rows(x[0],
                              ce_labels(x[0].size(0), x[0].size(1), x[0].device(), DType::int32));
  };
  return {c, i32};
}

// The gradient kernel's values: softmax - one-hot, times each row's gradient (here not 1),
// against the double reference, for both label dtypes, on every case device.
TIDE_OP_TEST(Linalg, CrossEntropyGrad, {OpId::cross_entropy_grad, Check::value}) {
  std::vector<Device> devices = test::case_devices();
  devices.insert(devices.begin(), Device::cpu());
  const int64_t n = 6, cl = 11;
  std::vector<double> x;
  for (int64_t i = 0; i < n * cl; ++i) x.push_back(std::sin(double(i) * 0.7) * 3);
  const std::vector<double> g{0.5, -1, 2, 0.25, 3, -0.75};
  Array lsm = softmax_ref({Shape{n, cl}, x}, true);
  for (Device d : devices)
    for (DType lt : {DType::int32, DType::int64}) {
      SCOPED_TRACE(d.str() + " " + std::string(name(lt)));
      Tensor logits = from_data(x, Shape{n, cl}, DType::float64, d).requires_grad_();
      Tensor rows = cross_entropy_rows(logits, ce_labels(n, cl, d, lt));
      rows.backward(from_data(g, Shape{n}, DType::float64, d));
      std::vector<double> got = logits.grad().to_vector<double>();
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < cl; ++j) {
          const size_t k = size_t(r * cl + j);
          const double want = (std::exp(lsm.v[k]) - (j == ce_label(r, cl) ? 1 : 0)) * g[size_t(r)];
          EXPECT_NEAR(got[k], want, 1e-13) << "row " << r << " class " << j;
        }
    }
}

TEST(LinalgErrors, CrossEntropyRowsRefusesBadInputAtTheCall) {
  Tensor x = zeros({4, 5});
  test::expect_contains(
      test_util::error_of([&] { cross_entropy_rows(zeros({4}), ce_labels(4, 5, Device::cpu())); }),
      {"[cross_entropy]", "logits must be (N, C)"}, "rank");
  test::expect_contains(test_util::error_of([&] { cross_entropy_rows(x, zeros({4})); }),
                        {"[cross_entropy]", "labels must be (N) int32 or int64"}, "label dtype");
  test::expect_contains(
      test_util::error_of([&] { cross_entropy_rows(x, ce_labels(3, 5, Device::cpu())); }),
      {"[cross_entropy]", "disagree on N"}, "N");
  test::expect_contains(
      test_util::error_of([&] {
        cross_entropy_rows(zeros({4, 5}, DType::int64), ce_labels(4, 5, Device::cpu()));
      }),
      {"[cross_entropy]"}, "integer logits");
}

// A label outside [0, C), found when the kernels run: the CPU fails the loss (and the
// gradient), naming the label; a real GPU makes the row's loss NaN.
TEST(LinalgErrors, CrossEntropyRowsLabelOutsideTheClasses) {
  std::vector<Device> devices = test::case_devices();
  devices.insert(devices.begin(), Device::cpu());
  for (Device d : devices) {
    SCOPED_TRACE(d.str());
    const bool fails = d.is_cpu() || cuda::runs_host_kernels(d.index);
    Tensor x = randn({3, 4}).to(d).requires_grad_();
    Tensor loss = sum(cross_entropy_rows(x, from_vector<int64_t>({0, 4, 1}, Shape{3}, d)));
    if (fails) {
      test::expect_contains(test_util::error_of([&] { (void)loss.item<float>(); }),
                            {"[cross_entropy] label 4 of row 1", "outside the 4 classes"}, "loss");
    } else {
      EXPECT_TRUE(std::isnan(loss.item<float>()));
    }
  }
}

// ---- softmax / log_softmax -------------------------------------------------------------------

Array softmax_ref(const Array& a, bool log_out) {
  Array y{a.shape, std::vector<double>(a.v.size())};
  int64_t n = a.shape.ndim() ? a.shape[a.shape.ndim() - 1] : 1;
  int64_t rows = n ? int64_t(a.v.size()) / n : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = a.v.data() + r * n;
    double m = x[0];
    for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
    for (int64_t i = 0; i < n; ++i)
      y.v[size_t(r * n + i)] = log_out ? x[i] - m - std::log(s) : std::exp(x[i] - m) / s;
  }
  return y;
}

std::vector<ShapeSet> row_shapes(std::mt19937& rng) {
  std::uniform_int_distribution<int> rank(1, 3);
  return {{test::random_shape(rng, rank(rng), 1, 6)},
          {test::random_shape(rng, rank(rng), 1, 6)},
          {Shape{1, 1}},
          {Shape{4, 1}},
          {Shape{0, 5}},
          {Shape{5, 0}},
          {Shape{2, 0, 3}},
          {Shape{200, 300}}};
}

TIDE_OP_CASES(Linalg, Softmax) {
  std::vector<OpCase> v;
  for (bool log_out : {false, true})
    v.push_back(
        OpCase{.op = log_out ? OpId::log_softmax : OpId::softmax,
               .build = [=](const V& x) { return log_out ? log_softmax(x[0]) : softmax(x[0]); },
               .ref = [=](const std::vector<Array>& in) { return softmax_ref(in[0], log_out); },
               .shapes = row_shapes,
               .gen = test::gen_uniform(-4, 4),
               .grad = true});
  return v;
}

TEST(Linalg, SoftmaxRowsSumToOneAndLargeInputsStayFinite) {
  // Offsets like 1000 overflow exp() without the max subtraction.
  std::vector<double> vals{1000, 1001, 999, -1000, -1001, -1002, 0, 1e-3, -1e-3, 3000, 0, -3000};
  for (DType dt : {DType::float32, DType::float64}) {
    SCOPED_TRACE(std::string(name(dt)));
    Tensor x = from_data(vals, Shape{4, 3}, dt);
    std::vector<double> s = softmax(x).to_vector<double>();
    std::vector<double> ls = log_softmax(x).to_vector<double>();
    Array want = softmax_ref({Shape{4, 3}, vals}, false);
    Array lwant = softmax_ref({Shape{4, 3}, vals}, true);
    for (int r = 0; r < 4; ++r) {
      double row = 0;
      for (int i = 0; i < 3; ++i) {
        size_t k = size_t(r * 3 + i);
        ASSERT_TRUE(std::isfinite(s[k]) && std::isfinite(ls[k])) << "element " << k;
        EXPECT_NEAR(s[k], want.v[k], 1e-6);
        EXPECT_NEAR(ls[k], lwant.v[k], 1e-4 * std::max(1.0, std::abs(lwant.v[k])));
        row += s[k];
      }
      EXPECT_NEAR(row, 1.0, 1e-6) << "row " << r;
    }
    // Random rows sum to 1 too.
    Generator gen(7);
    Tensor big = mul(randn({64, 50}, dt, gen), 30.0);
    std::vector<double> sums = sum(softmax(big), -1).to_vector<double>();
    for (double t : sums) EXPECT_NEAR(t, 1.0, 1e-5);
    std::vector<double> lse = sum(exp(log_softmax(big)), 1).to_vector<double>();
    for (double t : lse) EXPECT_NEAR(t, 1.0, 1e-5);
  }
}

TEST(LinalgErrors, Softmax) {
  EXPECT_TIDE_ERROR(softmax(full({}, 1.0)), "[softmax]", "0-d");
  EXPECT_TIDE_ERROR(log_softmax(full({}, 1.0)), "[log_softmax]", "0-d");
  EXPECT_TIDE_ERROR(softmax(ones({2, 3}, DType::int32)), "[softmax]", "(2, 3)", "int32");
  EXPECT_TIDE_ERROR(log_softmax(ones({4}, DType::int64)), "[log_softmax]", "(4,)");
}

}  // namespace
}  // namespace tide
