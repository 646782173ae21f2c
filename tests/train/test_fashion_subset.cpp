// Fashion-MNIST end to end on a small subset: an MLP 784-64-10 (ReLU) trained with
// cross-entropy and Adam on the first 2000 training images for 4 epochs must reach a loose
// test accuracy (> 0.75 on the first 2000 test images; about 0.80 is typical). A
// regression check for the data path, the ops, autograd and the optimizer together, not a
// benchmark: small enough for a few seconds in Release and still reasonable under
// AddressSanitizer. Skipped (with a message) when Debian's dataset-fashion-mnist is not
// installed.
//
// The same for a small CNN (conv, batch norm, max-pool, flatten), trained eagerly
// and with the step traced: both must learn, and the traced run must give the eager run's
// bits (loss and parameters).
//
// Not done here: the full data set or the 0.89 / 0.92 targets of `tide train fashion-mnist`.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>

#include "nn/nn.h"
#include "tide.h"
#include "trace/function.h"
#include "train/data.h"
#include "train/optimizer.h"

using namespace tide;
using namespace tide::train;

namespace {

constexpr int64_t kTrainImages = 2000, kTestImages = 2000;
constexpr int kEpochs = 4;
constexpr double kMinTestAccuracy = 0.75;
// Fashion-MNIST's training-set pixel mean and standard deviation (of pixel/255).
constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;

// Why the data set cannot be read, or "" when it can.
std::string missing_data(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* base : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    const fs::path p = fs::path(dir) / base;
    if (fs::exists(p, ec)) continue;
    if (fs::exists(p.string() + ".gz", ec)) {
      if (idx_gzip_supported()) continue;
      return p.string() + ".gz is gzipped and tide was built without zlib";
    }
    return p.string() + "[.gz] not found (install Debian's dataset-fashion-mnist)";
  }
  return "";
}

// Fraction of `data`'s examples whose argmax matches the label; one sync at the end.
double accuracy(nn::Module& net, DataSource& data) {
  NoGrad no_grad;
  net.eval();
  data.reset(0);
  Tensor correct = zeros(Shape{});
  while (auto b = data.next_batch()) correct.add_(sum(eq(argmax(net(b->x), 1), b->y)));
  net.train();
  return correct.item<double>() / double(data.size());
}

TEST(FashionSubset, MlpLearnsTheFirst2000Images) {
  const std::string dir = kFashionMnistDir;
  if (std::string why = missing_data(dir); !why.empty()) GTEST_SKIP() << why;

  IdxSource train_data(IdxOptions()
                           .dir(dir)
                           .split("train")
                           .limit(kTrainImages)
                           .batch_size(50)
                           .shuffle(true)
                           .seed(0)
                           .normalize(kPixelMean, kPixelStd));
  IdxSource test_data(IdxOptions()
                          .dir(dir)
                          .split("t10k")
                          .limit(kTestImages)
                          .batch_size(500)
                          .shuffle(false)
                          .normalize(kPixelMean, kPixelStd));
  ASSERT_EQ(train_data.size(), kTrainImages);
  ASSERT_EQ(test_data.size(), kTestImages);
  const int64_t features = train_data.rows() * train_data.cols();
  ASSERT_EQ(features, 784);

  Generator gen{0};
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(nn::LinearOptions(features, 64), gen),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(nn::LinearOptions(64, 10), gen)});
  Adam opt(net->parameters(), AdamOptions(2e-3));

  const double before = accuracy(*net, test_data);
  double first_epoch_loss = 0, last_epoch_loss = 0;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    train_data.reset(uint64_t(epoch));
    Tensor loss_sum = zeros(Shape{});
    while (auto b = train_data.next_batch()) {
      opt.zero_grad();
      Tensor loss = nn::cross_entropy((*net)(b->x), b->y);
      loss.backward();
      opt.step();
      NoGrad no_grad;
      loss_sum.add_(loss.detach(), double(b->x.shape().dim(0)));
    }
    const double mean_loss = loss_sum.item<double>() / double(train_data.size());
    ASSERT_TRUE(std::isfinite(mean_loss)) << "epoch " << epoch + 1;
    (epoch == 0 ? first_epoch_loss : last_epoch_loss) = mean_loss;
  }
  const double after = accuracy(*net, test_data);
  RecordProperty("test_accuracy", std::to_string(after));
  EXPECT_LT(last_epoch_loss, first_epoch_loss);
  EXPECT_GT(after, kMinTestAccuracy)
      << "test accuracy before training " << before << ", mean training loss " << first_epoch_loss
      << " (epoch 1) -> " << last_epoch_loss << " (epoch " << kEpochs << ")";
}

// conv 3x3 1->8 (pad 1), batch norm, ReLU, max-pool 2, flatten, 1568->10; two epochs on the
// first 2000 images. Returns the test accuracy, the last minibatch's loss and the parameters.
struct CnnRun {
  double accuracy = 0;
  float last_loss = 0;
  std::vector<std::vector<float>> state;
};

CnnRun train_cnn(bool traced) {
  IdxSource train_data(IdxOptions()
                           .dir(kFashionMnistDir)
                           .split("train")
                           .limit(kTrainImages)
                           .batch_size(50)
                           .shuffle(true)
                           .seed(0)
                           .normalize(kPixelMean, kPixelStd));
  IdxSource test_data(IdxOptions()
                          .dir(kFashionMnistDir)
                          .split("t10k")
                          .limit(kTestImages)
                          .batch_size(500)
                          .shuffle(false)
                          .normalize(kPixelMean, kPixelStd));
  Generator gen{0};
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 8, 3).padding(1), gen),
      std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(Pool2dOptions(2)), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(nn::LinearOptions(8 * 14 * 14, 10), gen)});
  Adam opt(net->parameters(), AdamOptions(2e-3));
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = nn::cross_entropy((*net)(x.reshape({x.size(0), 1, 28, 28})), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto traced_step = trace::function(step, {.name = "cnn_step", .warmup_calls = 1});
  CnnRun run;
  Tensor loss;
  for (int epoch = 0; epoch < 2; ++epoch) {
    train_data.reset(uint64_t(epoch));
    while (auto b = train_data.next_batch())
      loss = traced ? traced_step(b->x, b->y) : step(b->x, b->y);
  }
  run.last_loss = loss.item<float>();
  // accuracy() feeds (N, 784) rows: the CNN needs images.
  NoGrad no_grad;
  net->eval();
  test_data.reset(0);
  Tensor correct = zeros(Shape{});
  while (auto b = test_data.next_batch())
    correct.add_(sum(eq(argmax((*net)(b->x.reshape({b->x.size(0), 1, 28, 28})), 1), b->y)));
  run.accuracy = correct.item<double>() / double(test_data.size());
  for (const auto& [name, t] : net->named_state()) run.state.push_back(t.to_vector<float>());
  return run;
}

TEST(FashionSubset, CnnLearnsEagerAndTracedAlike) {
  if (std::string why = missing_data(kFashionMnistDir); !why.empty()) GTEST_SKIP() << why;
  const CnnRun eager = train_cnn(false), traced = train_cnn(true);
  RecordProperty("test_accuracy", std::to_string(eager.accuracy));
  EXPECT_GT(eager.accuracy, kMinTestAccuracy);
  EXPECT_TRUE(std::isfinite(eager.last_loss));
  EXPECT_EQ(traced.last_loss, eager.last_loss) << "the traced step replays the eager kernels";
  EXPECT_EQ(traced.accuracy, eager.accuracy);
  EXPECT_EQ(traced.state, eager.state) << "parameters and batch-norm buffers";
}

}  // namespace
