// The textbook MLP the benchmarks train (d2l's asynchronous-computation experiment):
// Linear(512, 2048) + ReLU, Linear(2048, 512) + ReLU, Linear(512, 1), SGD lr 0.005, batch
// 1024. Shared by bench_mlp.cpp (one process) and bench_dist.cpp (data-parallel ranks).
#pragma once

#include <cstdint>
#include <memory>

#include "nn/nn.h"
#include "tide.h"

namespace tide_bench {

constexpr int64_t kBatch = 1024, kIn = 512, kH1 = 2048, kH2 = 512, kOut = 1;
constexpr double kLr = 0.005;

inline std::shared_ptr<tide::nn::Sequential> textbook_mlp(tide::Generator& gen) {
  namespace nn = tide::nn;
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(nn::LinearOptions(kIn, kH1), gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(nn::LinearOptions(kH1, kH2), gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(nn::LinearOptions(kH2, kOut), gen)});
}

}  // namespace tide_bench
