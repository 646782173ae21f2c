// tide_bench_torch: the libtorch anchors DESIGN §9 names for per-op overhead and MLP
// training, measured the same way as their tide counterparts in bench_tide.cpp:
//   BM_TorchTinyAdd   y = x + 1 on a 1x2 CPU tensor (libtorch's eager CPU ops run in the
//                     calling thread: this is dispatch + kernel, complete on return)
//   BM_TorchMlpStep   the same 2-layer MLP SGD step as BM_MlpStep, reading the loss
// Built only when find_package(Torch) succeeds (Debian: libtorch-dev). Does not link tide.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>

namespace {

void BM_TorchTinyAdd(benchmark::State& state) {
  torch::Tensor x = torch::ones({1, 2});
  torch::Tensor y;
  for (auto _ : state) {
    y = x + 1;
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TorchTinyAdd)->UseRealTime();

void BM_TorchMlpStep(benchmark::State& state) {
  constexpr int64_t kBatch = 64, kIn = 256, kHidden = 256, kOut = 10;
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({kBatch, kIn}), target = torch::randn({kBatch, kOut});
  torch::Tensor w1 = (torch::randn({kIn, kHidden}) * 0.05).requires_grad_();
  torch::Tensor b1 = torch::zeros({kHidden}).requires_grad_();
  torch::Tensor w2 = (torch::randn({kHidden, kOut}) * 0.05).requires_grad_();
  torch::Tensor b2 = torch::zeros({kOut}).requires_grad_();
  torch::Tensor* params[] = {&w1, &b1, &w2, &b2};
  float loss_value = 0;
  for (auto _ : state) {
    torch::Tensor h = torch::relu(torch::matmul(x, w1) + b1);
    torch::Tensor d = torch::matmul(h, w2) + b2 - target;
    torch::Tensor loss = (d * d).mean();
    loss.backward();
    {
      torch::NoGradGuard no_grad;
      for (torch::Tensor* p : params) {
        p->sub_(p->grad(), 0.01);
        p->mutable_grad() = torch::Tensor();  // like tide's zero_grad(): drop the gradient
      }
    }
    loss_value = loss.item<float>();  // the sync; also keeps the step from being optimised out
  }
  state.SetItemsProcessed(state.iterations());
  // Not DoNotOptimize(loss_value): with Google Benchmark 1.7.1 and -O3 that garbled the
  // float here (the counter then showed values like -1e34 while the loss was 0.9).
  state.counters["loss"] = loss_value;
}
BENCHMARK(BM_TorchMlpStep)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("torch_threads", std::to_string(torch::get_num_threads()));
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("OPENBLAS_CORETYPE", coretype ? coretype : "(unset)");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
