// Batched matmul (ops/linalg.h): (..., m, k) @ (..., k, n) with broadcast batch dimensions
// and the transpose flags, against a double-precision loop written here; gradients by
// float64 central differences (a broadcast operand's gradient sums over its batches);
// empty batches; the errors; traced replays bitwise equal to eager on the CPU and the fake
// GPU. The 2-D cases are in test_linalg.cpp.
#include <cmath>

#include "tests/ops/op_harness.h"
#include "trace/function.h"

namespace tide {
namespace {

using test::Array;
using test::OpCase;
using test::ShapeSet;
using V = std::vector<Tensor>;

// The batch extents of shape s (all but the last two), right-aligned to `rank` with 1s.
std::vector<int64_t> batch_of(const Shape& s, int rank) {
  std::vector<int64_t> b(size_t(rank), 1);
  for (int i = 0; i < s.ndim() - 2; ++i) b[size_t(rank - (s.ndim() - 2) + i)] = s[i];
  return b;
}

// op(a) @ op(b) per batch, the batch dimensions broadcast NumPy's way, in double.
Array batched_ref(const Array& a, const Array& b, bool ta, bool tb) {
  const int ra = a.shape.ndim(), rb = b.shape.ndim(), nb = std::max(ra, rb) - 2;
  const int64_t ar = a.shape[ra - 2], ac = a.shape[ra - 1], br = b.shape[rb - 2],
                bc = b.shape[rb - 1];
  const int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
  const std::vector<int64_t> ba = batch_of(a.shape, nb), bb = batch_of(b.shape, nb);
  std::vector<int64_t> out;
  int64_t batches = 1;
  for (int i = 0; i < nb; ++i) {
    out.push_back(std::max(ba[size_t(i)], bb[size_t(i)]));
    if (ba[size_t(i)] == 0 || bb[size_t(i)] == 0) out.back() = 0;
    batches *= out.back();
  }
  out.push_back(m);
  out.push_back(n);
  Array c{Shape(out), std::vector<double>(size_t(batches * m * n), 0.0)};
  for (int64_t t = 0; t < batches; ++t) {
    // The batch index per dimension, then each operand's (0 where it broadcasts).
    int64_t rest = t, oa = 0, ob = 0, sa = 1, sb = 1;
    for (int i = nb - 1; i >= 0; --i) {
      const int64_t idx = rest % out[size_t(i)];
      rest /= out[size_t(i)];
      oa += (ba[size_t(i)] == 1 ? 0 : idx) * sa;
      ob += (bb[size_t(i)] == 1 ? 0 : idx) * sb;
      sa *= ba[size_t(i)];
      sb *= bb[size_t(i)];
    }
    const double* pa = a.v.data() + oa * ar * ac;
    const double* pb = b.v.data() + ob * br * bc;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += (ta ? pa[p * ac + i] : pa[i * ac + p]) * (tb ? pb[j * bc + p] : pb[p * bc + j]);
        c.v[size_t((t * m + i) * n + j)] = s;
      }
  }
  return c;
}

// (batch_a, batch_b, m, k, n) stored under the flags.
struct BatchedShape {
  std::vector<int64_t> ba, bb;
  int64_t m, k, n;
};

Shape stored(const std::vector<int64_t>& batch, int64_t r, int64_t c, bool t) {
  std::vector<int64_t> d = batch;
  d.push_back(t ? c : r);
  d.push_back(t ? r : c);
  return Shape(d);
}

std::vector<BatchedShape> batched_shapes() {
  return {{{2}, {2}, 3, 4, 5},         // (2,3,4) @ (2,4,5)
          {{2, 1}, {5}, 3, 4, 6},      // (2,1,3,4) @ (5,4,6): two batch loops
          {{}, {2}, 3, 4, 5},          // (3,4) @ (2,4,5): a broadcast
          {{2, 3}, {}, 4, 5, 2},       // b 2-D: one GEMM over a's rows
          {{2, 3}, {2, 3}, 2, 3, 4},   // 4-D @ 4-D: the batch dims merge
          {{3, 1}, {1, 2}, 2, 2, 2},   // each side broadcasts
          {{1, 2}, {2}, 2, 3, 2},      // an extent-1 dimension
          {{0}, {0}, 3, 4, 5},         // an empty batch
          {{2}, {2}, 3, 0, 4},         // an empty inner dimension: zeros
          {{4}, {4}, 16, 24, 12},      // larger products
          {{3, 2}, {1, 2}, 9, 8, 7}};  // a broadcast in the outer loop
}

TIDE_OP_CASES(Linalg, BatchedMatmul) {
  std::vector<OpCase> v;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      v.push_back(OpCase{
          .op = OpId::matmul,
          .build =
              [=](const V& x) {
                return matmul(x[0], x[1], {ta, tb});
              },
          .ref = [=](const std::vector<Array>& in) { return batched_ref(in[0], in[1], ta, tb); },
          .shapes =
              [=](std::mt19937&) {
                std::vector<ShapeSet> sets;
                for (const BatchedShape& s : batched_shapes())
                  sets.push_back({stored(s.ba, s.m, s.k, ta), stored(s.bb, s.k, s.n, tb)});
                return sets;
              },
          .gen = test::gen_uniform(-1, 1),
          .tol32 = {1e-5, 1e-5},
          .grad = true,
          .grad_max_numel = 200});
  return v;
}

// Many small products take the parallel path over batches: every batch still equals its
// own 2-D product, bit for bit.
TEST(Linalg, BatchedMatmulEqualsItsTwoDimensionalProducts) {
  Generator gen(4);
  for (DType dt : {DType::float32, DType::float64}) {
    Tensor a = randn({64, 5, 7}, dt, gen), b = randn({64, 7, 6}, dt, gen);
    Tensor y = matmul(a, b);
    ASSERT_EQ(y.shape(), (Shape{64, 5, 6}));
    for (int64_t i = 0; i < 64; ++i)
      EXPECT_EQ(y[i].to_vector<double>(), matmul(a[i], b[i]).to_vector<double>()) << i;
    // b 2-D folds the batches into one GEMM over a's rows: BLAS blocks it differently
    // from the slices' products, so equal within rounding, not bit for bit.
    Tensor big_a = randn({3, 70, 80}, dt, gen), big_b = randn({80, 90}, dt, gen);
    Tensor z = matmul(big_a, big_b);
    for (int64_t i = 0; i < 3; ++i) {
      const std::vector<double> got = z[i].to_vector<double>();
      const std::vector<double> want = matmul(big_a[i], big_b).to_vector<double>();
      for (size_t j = 0; j < got.size(); ++j)
        ASSERT_NEAR(got[j], want[j], 1e-4 * (1 + std::abs(want[j]))) << i << ", " << j;
    }
  }
}

TEST(LinalgErrors, BatchedMatmul) {
  EXPECT_TIDE_ERROR(matmul(ones({2, 3, 4}), ones({3, 4, 5})), "[matmul]",
                    "batch dimensions do not broadcast", "(2, 3, 4)", "(3, 4, 5)");
  EXPECT_TIDE_ERROR(matmul(ones({2, 3, 4}), ones({2, 5, 5})), "[matmul]", "inner dimensions",
                    "(2, 3, 4)", "(2, 5, 5)");
  EXPECT_TIDE_ERROR(matmul(ones({4}), ones({2, 4, 5})), "[matmul]", "rank >= 2", "(4,)");
  EXPECT_TIDE_ERROR(matmul(ones({2, 3, 4}), ones({2, 4, 5}, DType::float64)), "[matmul]",
                    "dtypes differ");
  // Three separate broadcast groups need more than two loops.
  EXPECT_TIDE_ERROR(matmul(ones({2, 1, 2, 1, 2}), ones({1, 2, 1, 2, 2})), "[matmul]",
                    "more than two separate groups");
}

// Attention-shaped products and their gradients traced with trace::function: every replay
// gives the eager bits, on the CPU and on the fake GPU.
TEST(Linalg, TracedBatchedMatmulMatchesEagerBitwise) {
  std::vector<Device> devices{Device::cpu()};
  for (Device d : test::case_devices())
    if (op_supported(d, OpId::matmul)) devices.push_back(d);
  for (Device dev : devices) {
    SCOPED_TRACE(dev.str());
    Generator gen{9};
    const Tensor x = randn({2, 3, 8, 16}, DType::float32, gen).to(dev);
    const Tensor w0 = randn({16, 16}, DType::float32, gen).to(dev);
    auto step = [](const Tensor& w, const Tensor& in) {
      Tensor q = matmul(in, w);                          // b 2-D: one GEMM
      Tensor s = softmax(matmul(q, in, {false, true}));  // (2, 3, 8, 8)
      Tensor loss = sum(mul(matmul(s, q), in));
      loss.backward();
      return loss;
    };
    Tensor we = clone(w0).requires_grad_(), wt = clone(w0).requires_grad_();
    auto f = trace::function(
        [&](const Tensor& in) {
          wt.zero_grad();
          return step(wt, in);
        },
        {.name = "attn"});
    for (int i = 0; i < 3; ++i) {
      we.zero_grad();
      Tensor le = step(we, x), lt = f(x);
      auto host = [](const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); };
      EXPECT_EQ(host(lt), host(le)) << "call " << i;
      EXPECT_EQ(host(wt.grad()), host(we.grad())) << "call " << i;
    }
  }
}

}  // namespace
}  // namespace tide
