// The float32 matmul precision (core/matmul_precision.h): `high` reaches the GPU GEMMs queued
// under it (the recording fake GPU rounds their operands to TF32, as CUDA's tensor cores do),
// a trace replays the setting it was traced with, the CPU computes in full precision under
// either setting, and float64 and 16-bit GEMMs ignore it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/matmul_precision.h"
#include "ops/kernel_entry.h"
#include "tests/ops/op_harness.h"
#include "trace/trace.h"

namespace tide {
namespace {

// x rounded to 10 mantissa bits, to nearest with ties away from zero (cvt.rna.tf32.f32).
double tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u = (u + 0x1000u) & ~0x1fffu;
  std::memcpy(&x, &u, sizeof u);
  return x;
}

// Values with all 23 mantissa bits in use, so that TF32 rounding changes them.
std::vector<double> values(int64_t n, double phase) {
  std::vector<double> v(size_t(n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::sin(double(i) * 1.37 + phase) / 3.0;
  return v;
}

// a (m x k) @ b (k x n) in double, each operand first passed through `round`.
template <class R>
std::vector<double> product(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                            int64_t k, int64_t n, R round) {
  std::vector<double> c(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t q = 0; q < k; ++q)
        c[size_t(i * n + j)] += round(a[size_t(i * k + q)]) * round(b[size_t(q * n + j)]);
  return c;
}

constexpr int64_t m = 8, k = 64, n = 8;

TEST(MatmulPrecision, DefaultsToHighestAndTheGuardPutsItBack) {
  EXPECT_EQ(float32_matmul_precision(), MatmulPrecision::highest);
  {
    Float32MatmulPrecisionGuard high(MatmulPrecision::high);
    EXPECT_EQ(float32_matmul_precision(), MatmulPrecision::high);
  }
  EXPECT_EQ(float32_matmul_precision(), MatmulPrecision::highest);
  for (MatmulPrecision p : {MatmulPrecision::highest, MatmulPrecision::high})
    EXPECT_EQ(matmul_precision_from_name(name(p)), p);
  EXPECT_FALSE(matmul_precision_from_name("medium").has_value());
}

// On the fake GPU, `high` gives the product of the TF32-rounded operands; on a real GPU
// (tide_cuda_tests), cuBLASLt's TF32 kernels: within TF32's rounding of every operand.
TEST(MatmulPrecision, HighRoundsFloat32OperandsToTf32OnAGpu) {
  const Device gpu = test::case_devices().front();
  const bool fake = kernels::detail::runs_host_kernels(gpu);
  Tensor a = from_data(values(m * k, 0.0), {m, k}, DType::float32).to(gpu);
  Tensor b = from_data(values(k * n, 0.5), {k, n}, DType::float32).to(gpu);
  const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  const std::vector<double> exact = product(va, vb, m, k, n, [](float x) { return double(x); });
  const std::vector<double> rounded = product(va, vb, m, k, n, tf32);
  const std::vector<double> abs_sum =
      product(va, vb, m, k, n, [](float x) { return std::abs(double(x)); });
  std::vector<float> full, high;
  {
    Float32MatmulPrecisionGuard guard(MatmulPrecision::high);
    high = matmul(a, b).to_vector<float>();
  }
  full = matmul(a, b).to_vector<float>();
  double off_high = 0;  // how far `high` is from the exact product
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_NEAR(full[i], exact[i], 1e-5) << i;
    // Each operand moves by at most 2^-10 of itself (one TF32 ulp, whatever the rounding).
    EXPECT_NEAR(high[i], exact[i], abs_sum[i] * std::ldexp(1.0, -9) + 1e-5) << i;
    if (fake) EXPECT_NEAR(high[i], rounded[i], 1e-5) << i;
    off_high = std::max(off_high, std::abs(high[i] - exact[i]));
  }
  // TF32's 10 bits move a product of 64 terms of ~0.1 by far more than float32's rounding.
  EXPECT_GT(off_high, 1e-4);
}

TEST(MatmulPrecision, TheCpuAndOtherDtypesComputeInFullPrecisionUnderHigh) {
  for (DType t : {DType::float32, DType::float64, DType::bfloat16}) {
    for (Device d : {Device::cpu(), test::case_devices().front()}) {
      if (t == DType::float32 && !d.is_cpu()) continue;  // the case above
      Tensor a = from_data(values(m * k, 0.0), {m, k}, t).to(d);
      Tensor b = from_data(values(k * n, 0.5), {k, n}, t).to(d);
      Tensor x = from_data(values(m * k, 0.0), {m, k}, t).to(d);
      Tensor w = from_data(values(k * n, 0.5), {k, n}, t).to(d);
      Tensor bias = from_data(values(n, 0.2), {n}, t).to(d);
      const std::vector<double> want = matmul(a, b).to_vector<double>();
      const std::vector<double> want_linear = linear(x, w, bias).to_vector<double>();
      Float32MatmulPrecisionGuard high(MatmulPrecision::high);
      EXPECT_EQ(matmul(a, b).to_vector<double>(), want) << name(t) << " on " << d.str();
      EXPECT_EQ(linear(x, w, bias).to_vector<double>(), want_linear)
          << name(t) << " on " << d.str();
    }
  }
}

TEST(MatmulPrecision, ATraceReplaysTheSettingItWasTracedWith) {
  const Device gpu = test::case_devices().front();
  Tensor a = from_data(values(m * k, 0.0), {m, k}, DType::float32).to(gpu);
  Tensor b = from_data(values(k * n, 0.5), {k, n}, DType::float32).to(gpu);
  std::vector<float> eager_high, eager_full;
  {
    Float32MatmulPrecisionGuard guard(MatmulPrecision::high);
    eager_high = matmul(a, b).to_vector<float>();
  }
  eager_full = matmul(a, b).to_vector<float>();
  ASSERT_NE(eager_high, eager_full);
  // Each function traces at its first call, under the setting of that call.
  auto mm = [](const Tensor& x, const Tensor& y) { return matmul(x, y); };
  auto traced_high = trace::function(mm);
  auto traced_full = trace::function(mm);
  {
    Float32MatmulPrecisionGuard guard(MatmulPrecision::high);
    EXPECT_EQ(traced_high(a, b).to_vector<float>(), eager_high);
  }
  EXPECT_EQ(traced_full(a, b).to_vector<float>(), eager_full);
  // Replayed under the other setting, each keeps its own.
  for (int replay = 0; replay < 2; ++replay) {
    {
      Float32MatmulPrecisionGuard guard(MatmulPrecision::high);
      EXPECT_EQ(traced_full(a, b).to_vector<float>(), eager_full);
    }
    EXPECT_EQ(traced_high(a, b).to_vector<float>(), eager_high);
  }
}

}  // namespace
}  // namespace tide
