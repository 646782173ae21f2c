// The nn pieces together: a tiny MLP trained by hand-written SGD lowers its loss.
#include <gtest/gtest.h>

#include "nn/nn.h"
#include "tide.h"

namespace tide::nn {
namespace {

TEST(NnIntegration, TinyMlpLearnsWithCrossEntropy) {
  manual_seed(7);
  Sequential net{std::make_shared<Linear>(LinearOptions(4, 16).init(Init::kaiming_uniform)),
                 std::make_shared<ReLU>(), std::make_shared<Dropout>(0.1),
                 std::make_shared<Linear>(16, 4)};
  // Class = index of the largest feature.
  Tensor x = randn({64, 4});
  Tensor labels = argmax(x, 1);
  float first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    net.zero_grad();
    Tensor loss = cross_entropy(net(x), labels);
    loss.backward();
    {
      NoGrad ng;
      for (Tensor& p : net.parameters()) p.sub_(p.grad(), 0.5);
    }
    float l = loss.item<float>();
    if (step == 0) first = l;
    last = l;
  }
  EXPECT_LT(last, 0.7f * first) << "first " << first << " last " << last;

  net.eval();
  Tensor logits = net(x);
  Tensor again = net(x);
  EXPECT_EQ(logits.to_vector<float>(), again.to_vector<float>());  // no dropout in eval
}

TEST(NnIntegration, DropoutGradientIsMaskTimesScale) {
  manual_seed(3);
  Dropout d(0.5);
  Tensor x = ones({1000});
  x.requires_grad_(true);
  Tensor y = d(x);
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), y.to_vector<float>());  // x = 1: grad = mask * 2
}

}  // namespace
}  // namespace tide::nn
