// Losses: values against hand computation, gradients against float64 central differences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "error_of.h"
#include "fake_gpu.h"
#include "nn/loss.h"
#include "tide.h"

namespace tide::nn {
namespace {

using LossFn = std::function<Tensor(const Tensor&)>;

// Checks d loss / d x (autograd) against central differences in float64.
void check_grad(const LossFn& f, const std::vector<double>& x0, const Shape& shape,
                double eps = 1e-6, double tol = 1e-7) {
  Tensor x = from_vector<double>(x0, shape);
  x.requires_grad_(true);
  Tensor loss = f(x);
  loss.backward();
  std::vector<double> g = x.grad().to_vector<double>();
  ASSERT_EQ(g.size(), x0.size());
  for (size_t i = 0; i < x0.size(); ++i) {
    std::vector<double> xp = x0, xm = x0;
    xp[i] += eps;
    xm[i] -= eps;
    double lp = f(from_vector<double>(xp, shape)).item<double>();
    double lm = f(from_vector<double>(xm, shape)).item<double>();
    EXPECT_NEAR(g[i], (lp - lm) / (2 * eps), tol) << "element " << i;
  }
}

TEST(NnLoss, L2AndMseValues) {
  Tensor p = from_vector<double>({1, 2, 3, 4}, {4});
  Tensor t = from_vector<double>({0, 2, 5, 3}, {4});
  // diffs 1, 0, -2, 1: squares 1, 0, 4, 1 -> sum 6
  EXPECT_DOUBLE_EQ(l2_loss(p, t).item<double>(), 0.5 * 6 / 4);
  EXPECT_DOUBLE_EQ(mse_loss(p, t).item<double>(), 6.0 / 4);
  EXPECT_EQ(l2_loss(p, t).ndim(), 0);
}

TEST(NnLoss, TargetReshapedLikePred) {
  // (N, 1) predictions with (N) targets: no (N, N) broadcast.
  Tensor p = from_vector<double>({1, 2, 3}, {3, 1});
  Tensor t = from_vector<double>({1, 1, 1}, {3});
  EXPECT_DOUBLE_EQ(l2_loss(p, t).item<double>(), 0.5 * (0 + 1 + 4) / 3);
  EXPECT_THROW(l2_loss(p, from_vector<double>({1, 1}, {2})), Error);
  EXPECT_THROW(mse_loss(p, from_vector<float>({1, 1, 1}, {3})), Error);
}

TEST(NnLoss, L2AndMseGradients) {
  std::vector<double> t0 = {0.3, -1.2, 0.7, 2.0, -0.4, 0.1};
  Tensor t = from_vector<double>(t0, {2, 3});
  std::vector<double> x0 = {1.1, -0.2, 0.5, 1.5, 0.9, -0.7};
  check_grad([&](const Tensor& x) { return l2_loss(x, t); }, x0, {2, 3});
  check_grad([&](const Tensor& x) { return mse_loss(x, t); }, x0, {2, 3});
}

std::vector<double> ref_cross_entropy_rows(const std::vector<double>& z, int64_t n, int64_t c,
                                           const std::vector<int64_t>& y) {
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) {
    double m = -INFINITY;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, z[size_t(i * c + j)]);
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(z[size_t(i * c + j)] - m);
    out.push_back(-(z[size_t(i * c + y[size_t(i)])] - m - std::log(s)));
  }
  return out;
}

TEST(NnLoss, CrossEntropyMatchesLogSoftmaxAtLabel) {
  std::vector<double> z = {0.1, 1.2, -0.3, 0.8, 2.0, -1.0, 0.0, 0.5, -0.7, 0.3, 0.9, 1.1};
  std::vector<int64_t> y = {0, 3, 1};
  auto rows = ref_cross_entropy_rows(z, 3, 4, y);
  double expected = (rows[0] + rows[1] + rows[2]) / 3;
  Tensor labels = from_vector<int64_t>(y, {3});
  EXPECT_NEAR(cross_entropy(from_vector<double>(z, {3, 4}), labels).item<double>(), expected,
              1e-12);
  // Against the library's own log_softmax too.
  std::vector<double> lp = log_softmax(from_vector<double>(z, {3, 4})).to_vector<double>();
  EXPECT_NEAR(expected, -(lp[0] + lp[7] + lp[9]) / 3, 1e-12);
  // float32 logits, int32 labels.
  std::vector<float> zf(z.begin(), z.end());
  Tensor l32 = from_vector<int32_t>({0, 3, 1}, {3});
  EXPECT_NEAR(cross_entropy(from_vector<float>(zf, {3, 4}), l32).item<double>(), expected, 1e-5);
}

TEST(NnLoss, CrossEntropyStableForLargeLogits) {
  std::vector<double> z = {1000, -1000, 500, 999, 1e3, 1e3};
  std::vector<int64_t> y = {2, 0};
  auto rows = ref_cross_entropy_rows(z, 2, 3, y);
  double expected = (rows[0] + rows[1]) / 2;  // (500 + ~1.0986) / 2
  Tensor labels = from_vector<int64_t>(y, {2});
  double got = cross_entropy(from_vector<double>(z, {2, 3}), labels).item<double>();
  EXPECT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, expected, 1e-9);
  std::vector<float> zf(z.begin(), z.end());
  float got32 = cross_entropy(from_vector<float>(zf, {2, 3}), labels).item<float>();
  EXPECT_TRUE(std::isfinite(got32));
  EXPECT_NEAR(got32, expected, 1e-3);
}

TEST(NnLoss, CrossEntropyGradient) {
  std::vector<double> z = {0.1, 1.2, -0.3, 0.8, 2.0, -1.0, 0.0, 0.5, -0.7};
  Tensor labels = from_vector<int64_t>({2, 0, 1}, {3});
  check_grad([&](const Tensor& x) { return cross_entropy(x, labels); }, z, {3, 3});
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected tide::Error";
  } catch (const Error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

TEST(NnLoss, CrossEntropyErrors) {
  Tensor z = zeros({3, 4});
  Tensor y = from_vector<int64_t>({0, 1, 2}, {3});
  expect_error([&] { cross_entropy(zeros({12}), y); }, {"[cross_entropy]", "(12,)"});
  expect_error([&] { cross_entropy(z, zeros({3})); }, {"[cross_entropy]", "float32"});
  expect_error(
      [&] {
        cross_entropy(z, from_vector<int64_t>({0, 1}, {2}));
      },
      {"[cross_entropy]", "(3, 4)", "(2,)"});
  expect_error([&] { cross_entropy(z, y.reshape({3, 1})); }, {"[cross_entropy]", "(3, 1)"});
  expect_error([&] { cross_entropy(zeros({3, 4}, DType::int64), y); }, {"[cross_entropy]"});
  expect_error(
      [&] {
        cross_entropy(zeros({0, 4}), zeros({0}, DType::int64));
      },
      {"[cross_entropy]", "empty"});
}

// Issue 11 item 17: a label outside [0, C) once made its row contribute 0 to the loss (a
// file of labels 200 trained to "loss 0.0000" and exited 0). The labels are on the device,
// so the check runs with the kernel, without a wait: the loss (and everything computed from
// it) fails, and the first sync that touches it throws, naming the label and the classes.
// On the CPU and on the fake GPU (which runs the CPU kernels); a real GPU makes the loss
// NaN instead (tests/ops/test_linalg.cpp, OneHot).
TEST(NnLoss, CrossEntropyLabelOutOfRangeFailsAtTheSync) {
  test_util::fake_gpu(8);
  for (Device d : {Device::cpu(), Device::cuda(8)}) {
    for (int64_t bad : {int64_t(200), int64_t(-1), int64_t(10), int64_t(1) << 40}) {
      SCOPED_TRACE(d.str() + " label " + std::to_string(bad));
      Tensor logits = zeros({3, 10}, DType::float32, d).requires_grad_();
      Tensor labels = from_vector<int64_t>({3, bad, 0}, {3}, d);
      Tensor loss;
      ASSERT_NO_THROW(loss = cross_entropy(logits, labels)) << "the check must not wait";
      std::string e = test_util::error_of([&] { (void)loss.item<float>(); });
      EXPECT_NE(e.find("[cross_entropy]"), std::string::npos) << e;
      EXPECT_NE(e.find("label " + std::to_string(bad)), std::string::npos) << e;
      EXPECT_NE(e.find("10 classes"), std::string::npos) << e;
      EXPECT_NE(e.find("row 1"), std::string::npos) << e;
      // The gradient is computed from the failed loss: it fails too.
      loss.backward();
      EXPECT_NE(test_util::error_of([&] {
                  (void)logits.grad().to_vector<float>();
                }).find("label " + std::to_string(bad)),
                std::string::npos);
    }
    // int32 labels are checked the same way.
    Tensor l32 = from_vector<int32_t>({200}, {1}, d);
    std::string e = test_util::error_of([&] {
      (void)cross_entropy(zeros({1, 10}, DType::float64, d), l32).item<double>();
    });
    EXPECT_NE(e.find("label 200"), std::string::npos) << e;
    // Valid labels at both ends of the range still work.
    Tensor ok = from_vector<int64_t>({0, 9}, {2}, d);
    EXPECT_NEAR(cross_entropy(zeros({2, 10}, DType::float32, d), ok).item<float>(), std::log(10.0),
                1e-6);
  }
}

}  // namespace
}  // namespace tide::nn
