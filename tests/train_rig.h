// A model with its optimizer and the whole training step (forward, L2 loss, backward,
// update), for the suites that check traced training steps against eager on each device
// (tests/trace, tests/cuda).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/nn.h"
#include "train/optimizer.h"

namespace tide::test_util {

struct TrainRig {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<train::Optimizer> opt;
};

struct RigOptions {
  std::vector<int64_t> sizes;  // features in, hidden..., out
  Device device = Device::cpu();
  bool adam = false;  // else SGD
  double lr = 0.05;
  double momentum = 0;  // SGD only
  uint64_t seed = 11;
  int tanh_after = -1;  // the hidden layer followed by Tanh instead of ReLU
  double dropout = 0;   // > 0: Dropout(dropout, *dropout_gen) after each activation
  Generator* dropout_gen = nullptr;
};

// Linear layers of o.sizes with an activation after each but the last, initialised from
// Generator(o.seed) in layer order, moved to o.device before the optimizer is built.
inline TrainRig make_rig(const RigOptions& o) {
  Generator gen(o.seed);
  TrainRig r;
  r.model = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < o.sizes.size(); ++i) {
    r.model->push_back(
        std::make_shared<nn::Linear>(nn::LinearOptions(o.sizes[i], o.sizes[i + 1]), gen));
    if (i + 2 < o.sizes.size()) {
      if (int(i) == o.tanh_after) r.model->push_back(std::make_shared<nn::Tanh>());
      else r.model->push_back(std::make_shared<nn::ReLU>());
      if (o.dropout > 0)
        r.model->push_back(std::make_shared<nn::Dropout>(o.dropout, *o.dropout_gen));
    }
  }
  r.model->to(o.device);
  if (o.adam)
    r.opt = std::make_unique<train::Adam>(r.model->parameters(), train::AdamOptions(o.lr));
  else
    r.opt = std::make_unique<train::SGD>(r.model->parameters(),
                                         train::SGDOptions(o.lr).momentum(o.momentum));
  return r;
}

inline Tensor train_step(TrainRig& r, const Tensor& x, const Tensor& y) {
  r.opt->zero_grad();
  Tensor loss = nn::l2_loss(r.model->forward(x), y);
  loss.backward();
  r.opt->step();
  return loss;
}

}  // namespace tide::test_util
