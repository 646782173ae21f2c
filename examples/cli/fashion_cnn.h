// The CNN `tide train fashion-mnist --model cnn` trains, shared with bench/bench_cnn.cpp so
// the benchmark times the same network: two conv blocks (conv 3x3 pad 1, batch norm, ReLU,
// max-pool 2) of 32 and 64 channels over (N, 1, rows, cols) images, then
// Flatten, Linear(64 * rows/4 * cols/4, 128), ReLU, Linear(128, 10). PyTorch's state-dict
// names for the same nn.Sequential are the module indices: 0.weight, 1.running_mean, ...
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "nn/nn.h"
#include "tide.h"

namespace tide::examples {

// rows and cols must be divisible by 4 (two 2x2 poolings); Fashion-MNIST's are 28 x 28.
inline std::shared_ptr<nn::Sequential> fashion_cnn(int64_t rows, int64_t cols, Generator& gen) {
  auto net = std::make_shared<nn::Sequential>();
  for (auto [in, out] : {std::pair<int64_t, int64_t>{1, 32}, {32, 64}}) {
    net->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in, out, 3).padding(1), gen));
    net->push_back(std::make_shared<nn::BatchNorm2d>(out));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::MaxPool2d>(Pool2dOptions(2)));
  }
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(
      std::make_shared<nn::Linear>(nn::LinearOptions(64 * (rows / 4) * (cols / 4), 128), gen));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(nn::LinearOptions(128, 10), gen));
  return net;
}

}  // namespace tide::examples
