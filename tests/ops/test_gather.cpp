// The gather family (ops/gather.h): take_rows and scatter_add_rows against double-precision
// loops on every case device, their gradients by float64 central differences, repeated and
// empty index lists, deterministic sums, out-of-range indices and argument errors.
#include <cmath>

#include "core/cuda/runtime.h"
#include "error_of.h"
#include "tests/ops/op_harness.h"

namespace tide {
namespace {

using test::Array;
using test::OpCase;
using test::ShapeSet;
using V = std::vector<Tensor>;

// A fixed index list for n rows: repeats, both ends, out of order (empty when n is 0).
std::vector<int64_t> picks(int64_t n) {
  if (n == 0) return {};
  return {n - 1, 0, n / 2, 0, n - 1, n / 3};
}

Tensor picks_on(int64_t n, Device d, DType dt = DType::int64) {
  std::vector<int64_t> p = picks(n);
  std::vector<double> v(p.begin(), p.end());
  return from_data(v, Shape{int64_t(p.size())}, dt, d);
}

int64_t width_of(const Shape& s) {
  int64_t w = 1;
  for (int d = 1; d < s.ndim(); ++d) w *= s[d];
  return w;
}

// The same case on integer dtypes (values only).
OpCase on_ints(OpCase c) {
  c.dtypes = {DType::int32, DType::int64};
  c.gen = test::gen_ints(-100, 100);
  c.grad = false;
  return c;
}

std::vector<ShapeSet> row_shapes(std::mt19937& rng) {
  return {{test::random_shape(rng, 2, 1, 9)},
          {test::random_shape(rng, 3, 1, 5)},
          {Shape{7}},
          {Shape{1, 4}},
          {Shape{0, 3}},
          {Shape{300, 257}}};
}

TIDE_OP_CASES(Gather, TakeRows) {
  OpCase c{
      .op = OpId::take_rows,
      .build = [](const V& x) { return take_rows(x[0], picks_on(x[0].size(0), x[0].device())); },
      .ref =
          [](const std::vector<Array>& in) {
            const Array& a = in[0];
            const int64_t w = width_of(a.shape);
            std::vector<int64_t> p = picks(a.shape[0]);
            Shape s = a.shape;
            s[0] = int64_t(p.size());
            Array y{s, {}};
            for (int64_t r : p)
              for (int64_t c = 0; c < w; ++c) y.v.push_back(a.v[size_t(r * w + c)]);
            return y;
          },
      .shapes = row_shapes,
      .grad = true};
  OpCase idx32 = c;  // int32 indices
  idx32.build = [](const V& x) {
    return take_rows(x[0], picks_on(x[0].size(0), x[0].device(), DType::int32));
  };
  idx32.grad = false;
  return {c, on_ints(c), idx32};
}

// g has one row per pick; y has n rows where n comes from g's shape: (k, ...) -> n = k + 2.
TIDE_OP_CASES(Gather, ScatterAddRows) {
  auto n_of = [](int64_t k) { return k + 2; };
  auto rows_of = [n_of](int64_t k) {
    std::vector<int64_t> p;
    for (int64_t i = 0; i < k; ++i) p.push_back((i * 5) % n_of(k));  // repeats once k > n
    return p;
  };
  OpCase c{.op = OpId::scatter_add_rows,
           .build =
               [=](const V& x) {
                 std::vector<int64_t> p = rows_of(x[0].size(0));
                 std::vector<double> v(p.begin(), p.end());
                 Tensor rows = from_data(v, Shape{int64_t(p.size())}, DType::int64, x[0].device());
                 return scatter_add_rows(x[0], rows, n_of(x[0].size(0)));
               },
           .ref =
               [=](const std::vector<Array>& in) {
                 const Array& g = in[0];
                 const int64_t k = g.shape[0], w = width_of(g.shape), n = n_of(k);
                 Shape s = g.shape;
                 s[0] = n;
                 Array y{s, std::vector<double>(size_t(n * w), 0.0)};
                 std::vector<int64_t> p = rows_of(k);
                 for (int64_t i = 0; i < k; ++i)
                   for (int64_t c = 0; c < w; ++c)
                     y.v[size_t(p[size_t(i)] * w + c)] += g.v[size_t(i * w + c)];
                 return y;
               },
           .shapes = row_shapes,
           .grad = true};
  return {c, on_ints(c)};
}

std::vector<Device> all_devices() {
  std::vector<Device> d = test::case_devices();
  d.insert(d.begin(), Device::cpu());
  return d;
}

// Sums of many rows into one: the same bits on every device (a fixed order: positions in
// increasing order), and the gradient of take_rows adds repeats.
TEST(Gather, ScatterSumsInPositionOrderOnEveryDevice) {
  const int64_t k = 5000;
  std::vector<float> g(size_t(k) * 3);
  for (size_t i = 0; i < g.size(); ++i) g[i] = float(std::sin(double(i)) * 1e4);
  std::vector<int64_t> rows(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) rows[size_t(i)] = (i * 7919) % 3;
  std::vector<float> want;
  for (Device d : all_devices()) {
    SCOPED_TRACE(d.str());
    Tensor y = scatter_add_rows(from_vector(g, Shape{k, 3}, d), from_vector(rows, Shape{k}, d), 4);
    std::vector<float> got = y.to_vector<float>();
    if (want.empty()) want = got;
    EXPECT_EQ(got, want);
    EXPECT_EQ(got[9], 0.0f) << "row 3 has no position";
  }
  Tensor src = ones({3, 2}, DType::float64).requires_grad_();
  sum(take_rows(src, from_vector<int64_t>({2, 2, 0, 2}, Shape{4}))).backward();
  EXPECT_EQ(src.grad().to_vector<double>(), (std::vector<double>{1, 1, 0, 0, 3, 3}));
}

// An index outside [0, n) is found when the kernel runs: the CPU (and a host-kernel fake)
// fails the op naming it; a real GPU's kernel cannot throw, so the row is NaN (or the
// lowest integer) in take_rows and the position is skipped by scatter_add_rows.
TEST(Gather, AnIndexOutsideTheRows) {
  for (Device d : all_devices()) {
    const bool fails = d.is_cpu() || cuda::runs_host_kernels(d.index);
    SCOPED_TRACE(d.str());
    Tensor src = from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{3, 2}, d);
    Tensor rows = from_vector<int64_t>({1, 7, -1}, Shape{3}, d);
    Tensor y = take_rows(src, rows);
    Tensor s = scatter_add_rows(ones({3, 2}, DType::float32, d), rows, 3);
    if (fails) {
      test::expect_contains(
          test_util::error_of([&] { (void)y.to_vector<float>(); }),
          {"[take_rows] index 7 at position 1", "outside the 3 rows [0, 3)", "test_gather.cpp"},
          "take_rows");
      test::expect_contains(test_util::error_of([&] { (void)s.to_vector<float>(); }),
                            {"[scatter_add_rows] index 7 at position 1"}, "scatter_add_rows");
    } else {
      std::vector<float> v = y.to_vector<float>();
      EXPECT_EQ(v[0], 3.0f);
      EXPECT_TRUE(std::isnan(v[2]) && std::isnan(v[5]));
      EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{0, 0, 1, 1, 0, 0}));
      Tensor yi = take_rows(from_vector<int32_t>({1, 2}, Shape{2}, d), rows);
      EXPECT_EQ(yi.to_vector<int32_t>()[1], std::numeric_limits<int32_t>::lowest());
    }
  }
}

TEST(GatherErrors, Arguments) {
  Tensor src = zeros({4, 2}), rows = zeros({3}, DType::int64), scalar = zeros({});
  Tensor float_rows = zeros({3}), column = zeros({3, 1}, DType::int64);
  Tensor g2 = zeros({2, 2}), g3 = zeros({3, 2});
  const uint64_t queued = Engine::get().stats().queued;
  EXPECT_TIDE_ERROR(take_rows(scalar, rows), "[take_rows]", "rank >= 1");
  EXPECT_TIDE_ERROR(take_rows(src, float_rows), "[take_rows]", "(3,) float32");
  EXPECT_TIDE_ERROR(take_rows(src, column), "[take_rows]", "(3, 1) int64");
  EXPECT_TIDE_ERROR(take_rows(Tensor(), rows), "[take_rows]");
  EXPECT_TIDE_ERROR(scatter_add_rows(g2, rows, 4), "[scatter_add_rows]",
                    "one row index per row of g", "(3,) int64", "(2, 2) float32");
  EXPECT_TIDE_ERROR(scatter_add_rows(g3, rows, -1), "[scatter_add_rows]", "n >= 0", "-1");
  EXPECT_EQ(Engine::get().stats().queued, queued) << "nothing was queued";
  for (Device d : test::case_devices()) {
    EXPECT_TIDE_ERROR(take_rows(zeros({4, 2}, DType::float32, d), rows), "[take_rows]",
                      "rows are on cpu", d.str());
  }
}

}  // namespace
}  // namespace tide
