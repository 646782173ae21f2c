// GEMMs over bfloat16 and float16 operands (ops/cpu/half_gemm.h on the CPU and the fake GPU,
// cuBLASLt in tide_cuda_tests): matmul under every transpose pair, batched matmul with a
// broadcast operand, linear with bias and ReLU, and their gradients, against double loops
// over the 16-bit inputs. The bound is the one rounding to the 16-bit type (half an ulp at
// the result) plus float32 accumulation's error; the result stays 16-bit and no cast appears
// in the graph.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "ops/cpu/half_gemm.h"
#include "tests/ops/op_harness.h"

namespace tide {
namespace {

// Deterministic values in about [-2, 2].
std::vector<double> values(int64_t n, double phase) {
  std::vector<double> v(size_t(n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::sin(double(i) * 0.731 + phase) * 2.0;
  return v;
}

// Half an ulp of `t`, relative: 2^-8 for bfloat16 (7 mantissa bits), 2^-11 for float16.
double half_ulp(DType t) { return t == DType::bfloat16 ? 1.0 / 256 : 1.0 / 2048; }

// Checks got (the 16-bit result, as floats) against want (double), where abs_sum[i] bounds
// the sum of |terms| of result i: one 16-bit rounding plus float32's summation error.
void expect_rounded_once(const std::vector<float>& got, const std::vector<double>& want,
                         const std::vector<double>& abs_sum, int64_t k, DType t) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double acc = double(k + 1) * std::ldexp(abs_sum[i], -24);
    ASSERT_NEAR(got[i], want[i], (std::abs(want[i]) + acc) * half_ulp(t) * 1.001 + acc) << i;
  }
}

struct Product {
  std::vector<double> want, abs_sum;
};

// op(a) @ op(b) in double over a (stored ra x ca) and b (stored rb x cb).
Product product(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t k,
                int64_t n, bool ta, bool tb) {
  Product p{std::vector<double>(size_t(m * n)), std::vector<double>(size_t(m * n))};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, as = 0;
      for (int64_t q = 0; q < k; ++q) {
        const double x = ta ? a[size_t(q * m + i)] : a[size_t(i * k + q)];
        const double y = tb ? b[size_t(j * k + q)] : b[size_t(q * n + j)];
        s += x * y;
        as += std::abs(x * y);
      }
      p.want[size_t(i * n + j)] = s;
      p.abs_sum[size_t(i * n + j)] = as;
    }
  return p;
}

std::vector<Device> devices() { return {Device::cpu(), test::case_devices().front()}; }

TEST(HalfGemm, MatmulUnderEveryTransposeRoundsOnce) {
  // Odd sizes, which no kernel's tile divides; and a shape oneDNN 2.6.3 multiplies wrongly on
  // two OpenMP threads with a transposed b (ops/cpu/half_gemm.cpp runs it on one).
  for (auto [m, k, n] : {std::array<int64_t, 3>{37, 70, 45}, std::array<int64_t, 3>{12, 32, 50}})
    for (DType t : {DType::bfloat16, DType::float16})
      for (Device d : devices())
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            SCOPED_TRACE(std::string(name(t)) + " on " + d.str() + " " + std::to_string(m) + "x" +
                         std::to_string(k) + "x" + std::to_string(n) + (ta ? " a^T" : "") +
                         (tb ? " b^T" : ""));
            Tensor a = from_data(values(m * k, 0.1), ta ? Shape{k, m} : Shape{m, k}, t).to(d);
            Tensor b = from_data(values(k * n, 0.7), tb ? Shape{n, k} : Shape{k, n}, t).to(d);
            Tensor y = matmul(a, b, {ta, tb});
            EXPECT_EQ(y.dtype(), t);
            EXPECT_EQ(y.shape(), (Shape{m, n}));
            const Product p = product(a.to_vector<float>(), b.to_vector<float>(), m, k, n, ta, tb);
            expect_rounded_once(y.to_vector<float>(), p.want, p.abs_sum, k, t);
          }
}

TEST(HalfGemm, BatchedMatmulWithABroadcastOperand) {
  // (2, 3, m, k) @ (3, k, n): b is broadcast over the outer batch.
  const int64_t m = 9, k = 33, n = 17;
  for (DType t : {DType::bfloat16, DType::float16})
    for (Device d : devices()) {
      SCOPED_TRACE(std::string(name(t)) + " on " + d.str());
      Tensor a = from_data(values(6 * m * k, 0.2), {2, 3, m, k}, t).to(d);
      Tensor b = from_data(values(3 * k * n, 1.3), {3, k, n}, t).to(d);
      Tensor y = matmul(a, b);
      EXPECT_EQ(y.dtype(), t);
      ASSERT_EQ(y.shape(), (Shape{2, 3, m, n}));
      const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
      std::vector<float> got = y.to_vector<float>();
      for (int64_t o = 0; o < 2; ++o)
        for (int64_t i = 0; i < 3; ++i) {
          const std::vector<float> ai(va.begin() + (o * 3 + i) * m * k,
                                      va.begin() + (o * 3 + i + 1) * m * k);
          const std::vector<float> bi(vb.begin() + i * k * n, vb.begin() + (i + 1) * k * n);
          const std::vector<float> gi(got.begin() + (o * 3 + i) * m * n,
                                      got.begin() + (o * 3 + i + 1) * m * n);
          const Product p = product(ai, bi, m, k, n, false, false);
          expect_rounded_once(gi, p.want, p.abs_sum, k, t);
        }
    }
}

TEST(HalfGemm, LinearAddsBiasAndReluBeforeItsOneRounding) {
  const int64_t rows = 21, k = 40, n = 19;
  for (DType t : {DType::bfloat16, DType::float16})
    for (Device d : devices())
      for (bool relu : {false, true}) {
        SCOPED_TRACE(std::string(name(t)) + " on " + d.str() + (relu ? " relu" : ""));
        Tensor x = from_data(values(rows * k, 0.4), {rows, k}, t).to(d);
        Tensor w = from_data(values(k * n, 2.1), {k, n}, t).to(d);
        Tensor bias = from_data(values(n, 0.9), {n}, t).to(d);
        Tensor y = linear(x, w, bias, relu);
        EXPECT_EQ(y.dtype(), t);
        Product p = product(x.to_vector<float>(), w.to_vector<float>(), rows, k, n, false, false);
        const std::vector<float> vb = bias.to_vector<float>();
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < n; ++j) {
            double& v = p.want[size_t(r * n + j)];
            v += vb[size_t(j)];
            p.abs_sum[size_t(r * n + j)] += std::abs(vb[size_t(j)]);
            // ReLU of a value this close to 0 may go either way: compare with its bound.
            if (relu && v < 0) v = 0;
          }
        expect_rounded_once(y.to_vector<float>(), p.want, p.abs_sum, k + 1, t);
      }
}

TEST(HalfGemm, GradientsAre16BitGemmsOfTheSameBound) {
  // d/dx sum(r * (x @ w)) = r @ w^T, d/dw = x^T @ r.
  const int64_t m = 12, k = 50, n = 23;
  for (DType t : {DType::bfloat16, DType::float16})
    for (Device d : devices()) {
      SCOPED_TRACE(std::string(name(t)) + " on " + d.str());
      Tensor x = from_data(values(m * k, 0.3), {m, k}, t).to(d);
      Tensor w = from_data(values(k * n, 1.1), {k, n}, t).to(d);
      Tensor r = from_data(values(m * n, 2.5), {m, n}, t).to(d);
      x.requires_grad_();
      w.requires_grad_();
      sum(mul(matmul(x, w), r)).backward();
      ASSERT_TRUE(x.grad().defined() && w.grad().defined());
      EXPECT_EQ(x.grad().dtype(), t);
      EXPECT_EQ(w.grad().dtype(), t);
      const std::vector<float> vx = x.to_vector<float>(), vw = w.to_vector<float>();
      // r * 1 is r exactly (mul's gradient by a ones tensor of the sum).
      const std::vector<float> vr = r.to_vector<float>();
      const Product gx = product(vr, vw, m, n, k, false, true);
      expect_rounded_once(x.grad().to_vector<float>(), gx.want, gx.abs_sum, n, t);
      const Product gw = product(vx, vr, k, m, n, true, false);
      expect_rounded_once(w.grad().to_vector<float>(), gw.want, gw.abs_sum, m, t);
    }
}

TEST(HalfGemm, NamesTheLibraryThatRunsIt) {
  const std::string lib = kernels::cpu::bf16_gemm_library();
  EXPECT_TRUE(lib.rfind("oneDNN ", 0) == 0 || lib.rfind("the float32 GEMM", 0) == 0) << lib;
}

}  // namespace
}  // namespace tide
