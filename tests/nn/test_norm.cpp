// nn::LayerNorm: PyTorch's parameter names and defaults, the options, its output against
// the op with the same parameters, gradients reaching the parameters, and input errors.
#include <gtest/gtest.h>

#include "nn/nn.h"
#include "tide.h"

namespace tide::nn {
namespace {

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (const auto& [k, t] : v) out.push_back(k);
  return out;
}

TEST(LayerNormLayer, DefaultsAndNames) {
  LayerNorm ln(4);
  EXPECT_EQ(names(ln.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(ln.weight().to_vector<float>(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(ln.bias().to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_TRUE(ln.weight().requires_grad());
  EXPECT_TRUE(
      names(LayerNorm(LayerNormOptions(4).elementwise_affine(false)).named_parameters()).empty());
  EXPECT_EQ(names(LayerNorm(LayerNormOptions(4).bias(false)).named_parameters()),
            (std::vector<std::string>{"weight"}));
}

// Each row of the output has mean 0 and variance 1 / (1 + eps / var) before the affine
// parameters; with set parameters it equals layer_norm with them, bit for bit.
TEST(LayerNormLayer, NormalisesRowsAndTrains) {
  Generator gen(3);
  Tensor x = randn({2, 5, 8}, DType::float64, gen);
  LayerNorm ln(LayerNormOptions(8).dtype(DType::float64).eps(1e-6));
  Tensor y = ln.forward(x);
  ASSERT_EQ(y.shape(), x.shape());
  std::vector<double> v = y.to_vector<double>();
  for (int r = 0; r < 10; ++r) {
    double s = 0, sq = 0;
    for (int j = 0; j < 8; ++j) s += v[size_t(r * 8 + j)];
    for (int j = 0; j < 8; ++j) sq += v[size_t(r * 8 + j)] * v[size_t(r * 8 + j)];
    EXPECT_NEAR(s / 8, 0.0, 1e-12) << "row " << r;
    EXPECT_NEAR(sq / 8, 1.0, 1e-4) << "row " << r;
  }
  Tensor w = randn({8}, DType::float64, gen), b = randn({8}, DType::float64, gen);
  {
    NoGrad no_grad;  // set the parameters in place, as an initialiser does
    Tensor pw = ln.weight(), pb = ln.bias();
    pw.copy_(w);
    pb.copy_(b);
  }
  EXPECT_EQ(ln.forward(x).to_vector<double>(), layer_norm(x, w, b, 1e-6).to_vector<double>());
  sum(ln.forward(x)).backward();
  ASSERT_TRUE(ln.bias().grad().defined());
  // d(sum y)/d(bias) counts the rows.
  EXPECT_EQ(ln.bias().grad().to_vector<double>(), std::vector<double>(8, 10.0));
  ASSERT_TRUE(ln.weight().grad().defined());
}

TEST(LayerNormLayer, Errors) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { LayerNorm(0); }).find("[LayerNorm]"), std::string::npos);
  EXPECT_NE(message([] { LayerNorm(LayerNormOptions(3).eps(0)); }).find("eps > 0"),
            std::string::npos);
  LayerNorm ln(3);
  EXPECT_NE(message([&] {
              ln.forward(zeros({2, 4}));
            }).find("expected input (..., 3)"),
            std::string::npos);
  EXPECT_NE(message([&] {
              ln.forward(zeros({2, 3}, DType::float64));
            }).find("dtype"),
            std::string::npos);
}

}  // namespace
}  // namespace tide::nn
