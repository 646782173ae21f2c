// The convolutional layers (nn/conv.h): output shapes, PyTorch's parameter and buffer names
// and shapes (named_parameters, named_state, the safetensors file), the default
// initialisation's bounds, BatchNorm2d's train / eval modes and its counter, a save -> load
// round trip, and the layers' argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "nn/nn.h"
#include "tide.h"

namespace tide::nn {
namespace {

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (const auto& [k, t] : v) out.push_back(k);
  return out;
}

std::shared_ptr<Sequential> small_cnn(Generator& gen) {
  return std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
      std::make_shared<Conv2d>(Conv2dOptions(1, 4, 3).padding(1), gen),
      std::make_shared<BatchNorm2d>(4), std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(Pool2dOptions(2)), std::make_shared<Flatten>(),
      std::make_shared<Linear>(LinearOptions(4 * 4 * 4, 3), gen)});
}

TEST(Conv2dLayer, Shapes) {
  Tensor x = randn({2, 3, 9, 8});
  EXPECT_EQ(Conv2d(Conv2dOptions(3, 5, 3)).forward(x).shape(), Shape({2, 5, 7, 6}));
  EXPECT_EQ(Conv2d(Conv2dOptions(3, 6, 3).padding(1).stride(2).groups(3)).forward(x).shape(),
            Shape({2, 6, 5, 4}));
  EXPECT_EQ(Conv2d(Conv2dOptions(3, 2, 3, 1).dilation(2, 1)).forward(x).shape(),
            Shape({2, 2, 5, 8}));
  EXPECT_EQ(MaxPool2d(Pool2dOptions(2)).forward(x).shape(), Shape({2, 3, 4, 4}));
  EXPECT_EQ(AvgPool2d(Pool2dOptions(3).stride(1).padding(1)).forward(x).shape(), x.shape());
  EXPECT_EQ(BatchNorm2d(3).forward(x).shape(), x.shape());
  EXPECT_EQ(Flatten().forward(x).shape(), Shape({2, 3 * 9 * 8}));
  Conv2d no_bias(Conv2dOptions(3, 4, 1).bias(false));
  EXPECT_FALSE(no_bias.bias().defined());
  EXPECT_EQ(names(no_bias.named_parameters()), (std::vector<std::string>{"weight"}));
}

// The names and shapes of PyTorch's state_dict for the same nn.Sequential (tide's Linear
// keeps its (in, out) weight layout).
TEST(Conv2dLayer, PyTorchStateNames) {
  Generator gen{1};
  auto net = small_cnn(gen);
  EXPECT_EQ(
      names(net->named_parameters()),
      (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "5.weight", "5.bias"}));
  EXPECT_EQ(names(net->named_buffers()),
            (std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"}));
  EXPECT_EQ(
      names(net->named_state()),
      (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                "1.running_var", "1.num_batches_tracked", "5.weight", "5.bias"}));
  auto state = net->named_state();
  EXPECT_EQ(state[0].second.shape(), Shape({4, 1, 3, 3}));
  EXPECT_EQ(state[1].second.shape(), Shape({4}));
  EXPECT_EQ(state[6].second.shape(), Shape({}));
  EXPECT_EQ(state[6].second.dtype(), DType::int64);
  EXPECT_FALSE(state[4].second.requires_grad()) << "buffers take no gradient";
  EXPECT_EQ(net->parameters().size(), 6u) << "optimizers see no buffers";
}

// PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias, fan_in =
// in / groups * KH * KW.
TEST(Conv2dLayer, KaimingUniformInitLikePyTorch) {
  Generator gen{3};
  Conv2d conv(Conv2dOptions(64, 128, 3).groups(2), gen);
  const double bound = 1.0 / std::sqrt(32.0 * 9.0);
  std::vector<float> w = conv.weight().to_vector<float>();
  ASSERT_EQ(w.size(), size_t(128 * 32 * 9));
  double sq = 0, lo = 0, hi = 0;
  for (float v : w) {
    sq += double(v) * v;
    lo = std::min(lo, double(v));
    hi = std::max(hi, double(v));
  }
  EXPECT_LE(hi, bound);
  EXPECT_GE(lo, -bound);
  EXPECT_GT(hi, 0.99 * bound) << "the whole range is used";
  EXPECT_LT(lo, -0.99 * bound);
  EXPECT_NEAR(std::sqrt(sq / double(w.size())), bound / std::sqrt(3.0), 0.01 * bound);
  for (float v : conv.bias().to_vector<float>()) EXPECT_LE(std::abs(double(v)), bound);
  Generator again{3};
  EXPECT_EQ(Conv2d(Conv2dOptions(64, 128, 3).groups(2), again).weight().to_vector<float>(), w)
      << "the same seed gives the same weights";
}

TEST(BatchNorm2dLayer, TrainAndEvalModes) {
  BatchNorm2d bn(BatchNorm2dOptions(2).momentum(0.5).dtype(DType::float64));
  Tensor x = from_data({1, 3, 10, 10, 5, 7, 20, 40}, Shape{2, 2, 1, 2}, DType::float64);
  // Channel 0 holds 1, 3, 5, 7 (mean 4, biased variance 5), channel 1 10, 10, 20, 40.
  std::vector<double> y = bn.forward(x).to_vector<double>();
  EXPECT_NEAR(y[0], (1 - 4) / std::sqrt(5 + 1e-5), 1e-12);
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), 1);
  std::vector<double> rm = bn.running_mean().to_vector<double>();
  std::vector<double> rv = bn.running_var().to_vector<double>();
  EXPECT_NEAR(rm[0], 0.5 * 0 + 0.5 * 4, 1e-12);
  EXPECT_NEAR(rv[0], 0.5 * 1 + 0.5 * 20.0 / 3.0, 1e-12) << "unbiased variance";
  bn.eval();
  y = bn.forward(x).to_vector<double>();
  EXPECT_NEAR(y[0], (1 - rm[0]) / std::sqrt(rv[0] + 1e-5), 1e-12) << "running estimates";
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), 1) << "eval counts nothing";
  EXPECT_EQ(bn.running_mean().to_vector<double>(), rm);
}

TEST(Conv2dLayer, SaveLoadRoundTrip) {
  Generator gen{5}, other{6};
  auto net = small_cnn(gen);
  Tensor x = randn({8, 1, 8, 8}, DType::float32, gen);
  (void)(*net)(x);  // training: the running estimates and the counter move
  (void)(*net)(x);
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "tide_nn_conv.safetensors").string();
  save(*net, path);
  auto copy = small_cnn(other);
  load(*copy, path);
  auto a = net->named_state(), b = copy->named_state();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].first);
    EXPECT_EQ(a[i].second.to_vector<double>(), b[i].second.to_vector<double>());
  }
  EXPECT_EQ(b[6].second.item<int64_t>(), 2);
  net->eval();
  copy->eval();
  EXPECT_EQ((*net)(x).to_vector<float>(), (*copy)(x).to_vector<float>());
  std::filesystem::remove(path);
}

TEST(Conv2dLayer, Errors) {
  auto expect_error = [](auto&& f, const char* part) {
    try {
      f();
      ADD_FAILURE() << "no error, expected " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error([] { Conv2d(Conv2dOptions(3, 4, 3).groups(2)); }, "[Conv2d] groups=2");
  expect_error([] { Conv2d(Conv2dOptions(0, 4, 3)); }, "[Conv2d] sizes must be positive");
  expect_error(
      [] {
        Conv2d(Conv2dOptions(3, 4, 3)).forward(zeros({2, 2, 5, 5}));
      },
      "expected input (N, 3, H, W)");
  expect_error(
      [] {
        BatchNorm2d(4).forward(zeros({2, 3, 5, 5}));
      },
      "[BatchNorm2d] expected input (N, 4, H, W)");
  expect_error([] { BatchNorm2d(BatchNorm2dOptions(4).momentum(2)); }, "momentum 2");
  expect_error(
      [] {
        Module m;
        m.register_buffer("a", zeros({1}));
        m.register_buffer("a", zeros({1}));
      },
      "[register_buffer] name 'a' is already a buffer");
}

}  // namespace
}  // namespace tide::nn
