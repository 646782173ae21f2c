// tide_bench_torch: the libtorch anchors docs/contributing.md (Benchmarks) names for per-op
// overhead and MLP training, measured the same way as their tide counterparts in bench_tide.cpp:
//   BM_TorchTinyAdd   y = x + 1 on a 1x2 CPU tensor (libtorch's eager CPU ops run in the
//                     calling thread: this is dispatch + kernel, complete on return)
//   BM_TorchMlpStep   the same 2-layer MLP SGD step as BM_MlpStep, reading the loss
//   BM_TorchTextbookMlpStep  the textbook MLP step of bench_mlp.cpp's BM_TextbookMlpStep
//                     (512-2048-512-1, 0.5 * MSE, SGD lr 0.005, batch 1024), under several
//                     thread configurations (Args below)
// Built only with -DTIDE_BENCH_LIBTORCH=ON (Debian: libtorch-dev). Does not link tide.
// Settings that libtorch and libgomp read only from the environment at startup
// (OMP_WAIT_POLICY, GOMP_SPINCOUNT, OMP_NUM_THREADS) are varied by bench/run.sh, which
// runs this binary once per environment; the in-process ones are benchmark arguments.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>

// libtorch here calls OpenBLAS (Debian's libblas.so.3 -> openblas-pthread); these are its
// thread-count calls, declared here rather than including a second cblas.h. Weak: a
// libtorch on another BLAS leaves them null and the blas argument is then ignored.
extern "C" {
void openblas_set_num_threads(int) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
}

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

int blas_threads() { return openblas_get_num_threads ? openblas_get_num_threads() : 0; }

// libtorch's intra-op thread count at startup (main records it before any benchmark): the
// out-of-the-box configuration, restored for torch:0 since at::set_num_threads sticks and
// run.sh interleaves the benchmarks randomly.
int g_startup_torch_threads = 0;

// The textbook MLP step (bench_mlp.cpp's table): torch::nn::Linear stores W as (out, in),
// so its GEMMs are the transposed forms of tide's, with the same FLOPs; the bias is fused
// into the forward GEMM (addmm). X is not a parameter, so no dX is computed.
// Args: {intra-op threads, OpenBLAS threads}; 0 = as at startup (torch:0/blas:0 is libtorch
// out of the box: here at::get_num_threads() is 1 at startup and OpenBLAS has 2 threads).
// OpenBLAS's count is restored after each benchmark.
void BM_TorchTextbookMlpStep(benchmark::State& state) {
  int torch_threads = int(state.range(0)), blas = int(state.range(1));
  at::set_num_threads(torch_threads > 0 ? torch_threads : g_startup_torch_threads);
  int blas_before = blas_threads();
  if (blas > 0 && openblas_set_num_threads) openblas_set_num_threads(blas);
  torch::manual_seed(42);
  torch::nn::Sequential net(torch::nn::Linear(512, 2048), torch::nn::ReLU(),
                            torch::nn::Linear(2048, 512), torch::nn::ReLU(),
                            torch::nn::Linear(512, 1));
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.005));
  torch::Tensor x = torch::randn({1024, 512}), y = torch::ones({1024, 1});
  float loss_value = 0;
  for (auto _ : state) {
    opt.zero_grad();
    torch::Tensor d = net->forward(x) - y;
    torch::Tensor loss = (d * d).mean() * 0.5;  // nn::l2_loss: mean(0.5 * (pred - y)^2)
    loss.backward();
    opt.step();
    loss_value = loss.item<float>();
  }
  state.SetItemsProcessed(state.iterations());
  // The 8 GEMMs' FLOPs, as BM_TextbookMlpStep counts them: 5 large, 3 of 1024 x 512 x 1.
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * (5.0 * 1024 * 2048 * 512 + 3.0 * 1024 * 512) / 1e9,
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["torch_threads"] = at::get_num_threads();
  state.counters["blas_threads"] = blas_threads();
  state.counters["loss"] = loss_value;
  if (blas > 0 && openblas_set_num_threads) openblas_set_num_threads(blas_before);
}
BENCHMARK(BM_TorchTextbookMlpStep)
    ->ArgNames({"torch", "blas"})
    ->Args({0, 0})  // out of the box
    ->Args({0, 1})
    ->Args({2, 0})  // at::set_num_threads(2)
    ->Args({2, 1})
    ->Args({1, 0})
    ->Args({1, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  g_startup_torch_threads = at::get_num_threads();
  benchmark::AddCustomContext("torch_threads", std::to_string(torch::get_num_threads()));
  benchmark::AddCustomContext("blas_threads", std::to_string(blas_threads()));
  for (const char* v :
       {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
    const char* e = std::getenv(v);
    benchmark::AddCustomContext(v, e ? e : "(unset)");
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("OPENBLAS_CORETYPE", coretype ? coretype : "(unset)");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
